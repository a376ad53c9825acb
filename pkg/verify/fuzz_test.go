package verify_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openmed/openmed-operator/pkg/verify"
)

// FuzzSend feeds arbitrary conditions, answers and header values through
// Compile and Send. Whatever they are: a compile error stays short, and a
// message is bounded, one valid UTF-8 line, without the header value or
// the request body. Seeds: testdata/conditions.yaml.
func FuzzSend(f *testing.F) {
	for _, c := range loadCases(f) {
		f.Add(expand(c.Condition), c.Answer.Body, 200, "v")
	}
	f.Fuzz(func(t *testing.T, condition, answer string, code int, value string) {
		prog, err := verify.Compile(condition)
		if err != nil {
			if len(err.Error()) > 600 {
				t.Fatalf("compile error of %d bytes", len(err.Error()))
			}
			return
		}
		if code < 200 || code > 599 {
			code = 200
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			_, _ = w.Write([]byte(answer))
		}))
		defer srv.Close()
		// A prefix no part of a message's own wording can form.
		secret := "S3cr3t-" + value
		req := verify.Request{URL: srv.URL, Header: http.Header{"X-Api-Key": {secret}}, Body: "NoteBody-" + answer, Timeout: 2 * time.Second}
		res := verify.Send(context.Background(), srv.Client(), req, prog)
		switch {
		case len(res.Message) > verify.MaxMessageBytes || res.Message == "":
			t.Fatalf("message of %d bytes: %q", len(res.Message), res.Message)
		case !utf8.ValidString(res.Message) || strings.ContainsAny(res.Message, "\n\r"):
			t.Fatalf("message is not one valid line: %q", res.Message)
		case strings.Contains(res.Message, secret):
			t.Fatalf("message contains the header value: %q", res.Message)
		case strings.Contains(res.Message, req.Body):
			t.Fatalf("message contains the request body: %q", res.Message)
		}
	})
}
