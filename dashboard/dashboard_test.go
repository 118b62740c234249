package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeStatus answers with the JSON of testStatus, or an error.
type fakeStatus struct {
	mu  sync.Mutex
	err error
}

func (f *fakeStatus) status(context.Context) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return json.Marshal(testStatus())
}

func get(t *testing.T, h http.Handler, path string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, rec.Header().Get("Content-Type"), string(b)
}

func TestHandler(t *testing.T) {
	f := &fakeStatus{}
	d := New(Config{Status: f.status, Interval: time.Second, Window: time.Minute})

	code, ctype, body := get(t, d, "/")
	if code != 200 || !strings.HasPrefix(ctype, "text/html") || !strings.Contains(body, `id="bricks"`) {
		t.Fatalf("GET /: %d %s\n%.200s", code, ctype, body)
	}
	// The page loads nothing from elsewhere: every src and href is relative.
	for _, attr := range []string{`src="http`, `href="http`, `src="//`, `href="//`} {
		if strings.Contains(body, attr) {
			t.Errorf("the page refers to an external resource (%s)", attr)
		}
	}
	for _, p := range []string{"/assets/app.js", "/assets/style.css"} {
		if code, _, body := get(t, d, p); code != 200 || len(body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, code, len(body))
		}
	}
	if code, _, _ := get(t, d, "/nothing"); code != 404 {
		t.Errorf("GET /nothing: %d, want 404", code)
	}

	code, _, body = get(t, d, "/api/status")
	want, _ := f.status(context.Background())
	if code != 200 || strings.TrimSpace(body) != string(want) {
		t.Errorf("GET /api/status: %d %s\nwant the status as is: %s", code, body, want)
	}

	code, _, body = get(t, d, "/api/view")
	var v View
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
		t.Fatalf("GET /api/view: %d %v: %s", code, err, body)
	}
	if v.Leader != "c1" || len(v.Bricks) != 4 || v.Series == nil || v.Series.IntervalMs != 1000 || v.Series.WindowMs != 60000 {
		t.Errorf("view: %+v", v)
	}
	if v.Sessions[0].AgeMs < 0 {
		t.Errorf("a session the view saw has unknown age %d", v.Sessions[0].AgeMs)
	}

	// Samples accumulate, at most Window/Interval of them.
	now := time.Now()
	for i := range 70 {
		if err := d.sample(context.Background(), now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	code, _, body = get(t, d, "/api/series")
	var ss []Sample
	if err := json.Unmarshal([]byte(body), &ss); code != 200 || err != nil || len(ss) != 60 {
		t.Fatalf("GET /api/series: %d %v, %d samples (want 60)", code, err, len(ss))
	}
	if ss[59].T-ss[0].T != 59_000 || ss[59].BricksDown != 2 || ss[59].DegradedChunks != 12 {
		t.Errorf("series from %d to %d: last %+v", ss[0].T, ss[59].T, ss[59])
	}

	// No leader: the API says so with 503; the page shows the message.
	f.mu.Lock()
	f.err = errors.New("coord: no leader known yet (election in progress)")
	f.mu.Unlock()
	for _, p := range []string{"/api/view", "/api/status"} {
		code, _, body = get(t, d, p)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader") {
			t.Errorf("GET %s without a leader: %d %s", p, code, body)
		}
	}
	if err := d.sample(context.Background(), now.Add(time.Hour)); err == nil {
		t.Errorf("a failed status fetch recorded a sample")
	}
}

func TestRunStops(t *testing.T) {
	f := &fakeStatus{}
	d := New(Config{Status: f.status, Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	d.mu.Lock()
	n := len(d.mu.ring.samples())
	d.mu.Unlock()
	if n == 0 {
		t.Errorf("Run took no sample")
	}
}
