// Package reqid carries a request id across processes and layers: a gRPC
// client interceptor sends the id of the caller's context (or a new one)
// as metadata, a server interceptor puts it into the handler's context,
// and a slog handler adds it as `req=<id>` to every record logged with
// that context (the *Context logging methods). A request a client starts
// keeps one id through a follower coordinator forwarding to the leader,
// or a brick replicating to its backups, as long as each layer passes its
// ctx on.
//
// The server interceptor also logs each failed request once, with its
// method, code and req; the level follows the code (see Level).
package reqid

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
)

// MetadataKey is the gRPC metadata key of the id (lower case, as gRPC wants).
const MetadataKey = "plumeria-req"

// IDBytesMax bounds an id taken from the wire; longer or odd ones are
// replaced by a fresh id, so logs never carry what a peer made up.
const IDBytesMax = 64

type ctxKey struct{}

// New returns a fresh id: 16 hex digits.
func New() string {
	s := strconv.FormatUint(rand.Uint64(), 16)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the id ctx carries, if any.
func From(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ctxKey{}).(string)
	return id, ok && id != ""
}

// Ensure returns ctx with an id (its own, or a new one) and that id.
func Ensure(ctx context.Context) (context.Context, string) {
	if id, ok := From(ctx); ok {
		return ctx, id
	}
	id := New()
	return With(ctx, id), id
}

// Valid reports whether an id from the wire may be used as is: 1 to
// IDBytesMax bytes of letters, digits, '-', '_' and '.'.
func Valid(id string) bool {
	if len(id) == 0 || len(id) > IDBytesMax {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Handler wraps a slog.Handler: records logged with a context that
// carries an id get the attribute req=<id>.
type Handler struct{ inner slog.Handler }

// NewHandler wraps h; wrapping a Handler again returns it unchanged.
func NewHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(Handler); ok {
		return h
	}
	return Handler{inner: h}
}

// Logger returns l with its handler wrapped by NewHandler.
func Logger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(Handler); ok {
		return l
	}
	return slog.New(NewHandler(l.Handler()))
}

func (h Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if id, ok := From(ctx); ok {
		r = r.Clone()
		r.AddAttrs(slog.String("req", id))
	}
	return h.inner.Handle(ctx, r)
}

func (h Handler) WithAttrs(as []slog.Attr) slog.Handler { return Handler{h.inner.WithAttrs(as)} }
func (h Handler) WithGroup(name string) slog.Handler    { return Handler{h.inner.WithGroup(name)} }
