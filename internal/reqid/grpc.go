package reqid

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// outgoing returns ctx with its id (a new one if it has none) in the
// outgoing metadata, replacing any id set there before.
func outgoing(ctx context.Context) context.Context {
	ctx, id := Ensure(ctx)
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(MetadataKey)) > 0 {
		md = md.Copy()
		md.Set(MetadataKey, id)
		return metadata.NewOutgoingContext(ctx, md)
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataKey, id)
}

// incoming returns ctx with the caller's id, or a new one if the caller
// sent none or an invalid one.
func incoming(ctx context.Context) (context.Context, string) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(MetadataKey); len(v) == 1 && Valid(v[0]) {
			return With(ctx, v[0]), v[0]
		}
	}
	id := New()
	return With(ctx, id), id
}

// UnaryClientInterceptor sends the request id with every unary call.
func UnaryClientInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(outgoing(ctx), method, req, reply, cc, opts...)
}

// StreamClientInterceptor sends the request id when a stream opens.
func StreamClientInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(outgoing(ctx), desc, cc, method, opts...)
}

// DialOptions are the client interceptors as dial options.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(UnaryClientInterceptor), grpc.WithChainStreamInterceptor(StreamClientInterceptor)}
}

// ServerOptions are the server interceptors as server options; failed
// requests are logged to log (nil: not logged).
func ServerOptions(log *slog.Logger) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(UnaryServerInterceptor(log)), grpc.ChainStreamInterceptor(StreamServerInterceptor(log))}
}

// UnaryServerInterceptor puts the caller's request id into the handler's
// context and logs a failed request with it.
func UnaryServerInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, _ = incoming(ctx)
		resp, err := handler(ctx, req)
		logFailure(ctx, log, info.FullMethod, err)
		return resp, err
	}
}

// StreamServerInterceptor does the same for streams: the stream's
// Context carries the id.
func StreamServerInterceptor(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, _ := incoming(ss.Context())
		err := handler(srv, &stream{ServerStream: ss, ctx: ctx})
		logFailure(ctx, log, info.FullMethod, err)
		return err
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

func logFailure(ctx context.Context, log *slog.Logger, method string, err error) {
	if err == nil || log == nil {
		return
	}
	code := status.Code(err)
	if errors.Is(err, context.Canceled) {
		code = codes.Canceled
	}
	lvl := Level(code)
	if !log.Enabled(ctx, lvl) {
		return
	}
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
	}
	attrs := []slog.Attr{slog.String("method", method), slog.String("code", code.String()), slog.String("err", msg)}
	if _, wrapped := log.Handler().(Handler); !wrapped {
		id, _ := From(ctx)
		attrs = append(attrs, slog.String("req", id))
	}
	log.LogAttrs(ctx, lvl, "request failed", attrs...)
}

// Level is how loudly a failed request with this code is logged. Codes a
// healthy cluster answers all the time (stale map epoch, no leader yet,
// a caller that gave up, a refused operator request) are Debug; a fenced
// writer is Info; codes that mean a bug or lost data are Error; the rest
// (timeouts, a full store, a peer speaking another protocol) Warn.
func Level(c codes.Code) slog.Level {
	switch c {
	case codes.Unknown, codes.Internal, codes.DataLoss:
		return slog.LevelError
	case codes.DeadlineExceeded, codes.ResourceExhausted, codes.Unimplemented, codes.Unauthenticated:
		return slog.LevelWarn
	case codes.PermissionDenied:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
