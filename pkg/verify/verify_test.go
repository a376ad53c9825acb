package verify_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/verify"
)

// conditionCase is one case of testdata/conditions.yaml.
type conditionCase struct {
	Name         string `json:"name"`
	Condition    string `json:"condition"`
	CompileError string `json:"compileError"`
	URL          string `json:"url"`
	Timeout      string `json:"timeout"`
	Answer       answer `json:"answer"`
	Want         struct {
		Passed  bool     `json:"passed"`
		Reason  string   `json:"reason"`
		Message []string `json:"message"`
	} `json:"want"`
}

// answer is how the test server answers a case.
type answer struct {
	Code        int                 `json:"code"`
	ContentType string              `json:"contentType"`
	Headers     map[string][]string `json:"headers"`
	Body        string              `json:"body"`
	BodyBytes   int                 `json:"bodyBytes"`
	Items       int                 `json:"items"`
	Echo        bool                `json:"echo"`
	Hang        bool                `json:"hang"`
	Cancel      bool                `json:"cancel"`
	Closed      bool                `json:"closed"`
	Hijack      bool                `json:"hijack"`
	Redirect    bool                `json:"redirect"`
}

// The golden request of every case: two secret headers and a note. No
// message may contain a header value or the body.
const (
	secretToken = "tok-3f9a1c2e77d0b3a8c4d5"
	secretKey   = "sk-live-8b1e2d9c0a7f6e5d"
	noteBody    = `{"text":"Patient John Smith, MRN 99817, seen today.","model_name":"pii-small","confidence_threshold":0.5}`
)

func goldenHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + secretToken}, "X-Api-Key": {secretKey}}
}

var repeatRE = regexp.MustCompile(`\$\{(.)\*(\d+)\}`)

// expand spells "${x*N}" as x repeated N times.
func expand(s string) string {
	return repeatRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := repeatRE.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[2])
		return strings.Repeat(sub[1], n)
	})
}

func loadCases(t testing.TB) []conditionCase {
	t.Helper()
	data, err := os.ReadFile("testdata/conditions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []conditionCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// serve starts a real HTTP server that gives a. arrived is closed when a
// request has come in.
func serve(t *testing.T, a answer, arrived chan<- struct{}) *httptest.Server {
	t.Helper()
	var once sync.Once
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		switch {
		case a.Hang:
			// Reading the body lets the server notice the client leave.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		case a.Hijack:
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		case a.Redirect && r.URL.Path == "/ok":
			w.WriteHeader(http.StatusOK)
			return
		case a.Redirect:
			http.Redirect(w, r, "/ok", http.StatusFound)
			return
		}
		if a.ContentType != "" {
			w.Header().Set("Content-Type", a.ContentType)
		}
		for name, values := range a.Headers {
			for _, v := range values {
				w.Header().Add(name, v)
			}
		}
		body := []byte(a.Body)
		switch {
		case a.BodyBytes > 0:
			body = []byte(strings.Repeat("x", a.BodyBytes))
		case a.Items > 0:
			items := make([]string, a.Items)
			for i := range items {
				items[i] = strconv.Itoa(i)
			}
			body = []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
		case a.Echo:
			var b strings.Builder
			for _, name := range []string{"Authorization", "X-Api-Key", "Content-Type"} {
				fmt.Fprintf(&b, "%s: %s\n", name, r.Header.Get(name))
			}
			b.WriteString("\n")
			note, _ := io.ReadAll(r.Body)
			body = append([]byte(b.String()), note...)
		}
		if a.Code != 0 {
			w.WriteHeader(a.Code)
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	// Runs before srv.Close (cleanups run last first): Close waits for
	// every handler.
	t.Cleanup(func() { close(release) })
	if a.Closed {
		srv.Close()
	}
	return srv
}

// TestSend runs every case of testdata/conditions.yaml against a real HTTP
// server and checks the verdict, the reason, the message and the message's
// invariants: bounded, one printable line, no secret.
func TestSend(t *testing.T) {
	cases := loadCases(t)
	if len(cases) < 25 {
		t.Fatalf("%d cases, want at least 25", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			prog, err := verify.Compile(expand(tc.Condition))
			if tc.CompileError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.CompileError) {
					t.Fatalf("Compile error = %v, want it to contain %q", err, tc.CompileError)
				}
				if verify.Check(expand(tc.Condition)) == nil {
					t.Fatal("Check accepts what Compile refuses")
				}
				return
			}
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			arrived := make(chan struct{})
			srv := serve(t, tc.Answer, arrived)
			req := verify.Request{URL: srv.URL + "/pii/extract", Method: http.MethodPost, Header: goldenHeader(), Body: noteBody}
			if tc.URL != "" {
				req.URL = tc.URL
			}
			if tc.Timeout != "" {
				if req.Timeout, err = time.ParseDuration(tc.Timeout); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.Answer.Cancel {
				go func() { <-arrived; cancel() }()
			}

			res := verify.Send(ctx, srv.Client(), req, prog)
			t.Logf("%+v", res)
			if res.Passed != tc.Want.Passed || res.Reason != tc.Want.Reason {
				t.Errorf("passed=%v reason=%s, want passed=%v reason=%s", res.Passed, res.Reason, tc.Want.Passed, tc.Want.Reason)
			}
			for _, sub := range tc.Want.Message {
				if !strings.Contains(res.Message, sub) {
					t.Errorf("message %q does not contain %q", res.Message, sub)
				}
			}
			checkMessage(t, res, req)
		})
	}
}

var reasons = []string{
	verify.ReasonPassed, verify.ReasonConditionFalse, verify.ReasonEvaluation, verify.ReasonTimeout,
	verify.ReasonConnection, verify.ReasonTooLarge, verify.ReasonInvalidRequest, verify.ReasonCanceled,
}

// checkMessage asserts what holds for every Result.
func checkMessage(t *testing.T, res verify.Result, req verify.Request) {
	t.Helper()
	if !slices.Contains(reasons, res.Reason) {
		t.Errorf("reason %q is not one of the constants", res.Reason)
	}
	if res.Passed != (res.Reason == verify.ReasonPassed) {
		t.Errorf("passed=%v with reason %s", res.Passed, res.Reason)
	}
	if res.Message == "" || len(res.Message) > verify.MaxMessageBytes {
		t.Errorf("message of %d bytes, want 1 to %d", len(res.Message), verify.MaxMessageBytes)
	}
	if !utf8.ValidString(res.Message) || strings.ContainsFunc(res.Message, func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Errorf("message is not one printable line: %q", res.Message)
	}
	for _, values := range req.Header {
		for _, v := range values {
			if strings.Contains(res.Message, v) {
				t.Errorf("message contains the header value %q: %s", v, res.Message)
			}
		}
	}
	// Not even the start of the body: a cut must not leave a prefix of an
	// echoed body behind.
	if req.Body != "" && strings.Contains(res.Message, req.Body[:min(len(req.Body), 16)]) {
		t.Errorf("message contains the request body: %s", res.Message)
	}
}

// TestSendHeaders checks what the pod receives: the headers as given, a
// Content-Type only when a body has none, the Host header as the host, the
// method and the body.
func TestSendHeaders(t *testing.T) {
	prog, err := verify.Compile("response.code == 200")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		req        verify.Request
		wantMethod string
		wantType   string
		wantHost   string
	}{
		{name: "body without a type", req: verify.Request{Body: "{}"}, wantMethod: "POST", wantType: "application/json"},
		{name: "type given", req: verify.Request{Method: "PUT", Body: "a", Header: http.Header{"content-type": {"text/plain"}}}, wantMethod: "PUT", wantType: "text/plain"},
		{name: "no body", req: verify.Request{Method: "GET"}, wantMethod: "GET"},
		{name: "host header", req: verify.Request{Method: "GET", Header: http.Header{"Host": {"pii.example"}}}, wantMethod: "GET", wantHost: "pii.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *http.Request
			var body string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got, body = r, string(b)
			}))
			defer srv.Close()
			tt.req.URL = srv.URL + "/pii/extract"
			if res := verify.Send(context.Background(), srv.Client(), tt.req, prog); !res.Passed {
				t.Fatalf("%+v", res)
			}
			if tt.wantHost == "" {
				tt.wantHost = srv.Listener.Addr().String()
			}
			switch {
			case got.Method != tt.wantMethod:
				t.Errorf("method %s, want %s", got.Method, tt.wantMethod)
			case got.Header.Get("Content-Type") != tt.wantType:
				t.Errorf("Content-Type %q, want %q", got.Header.Get("Content-Type"), tt.wantType)
			case got.Host != tt.wantHost:
				t.Errorf("host %q, want %q", got.Host, tt.wantHost)
			case body != tt.req.Body:
				t.Errorf("body %q, want %q", body, tt.req.Body)
			case got.URL.Path != "/pii/extract":
				t.Errorf("path %q", got.URL.Path)
			}
		})
	}
}

// TestSendNoProgram: a nil program is the caller's mistake, reported
// without asking the pod.
func TestSendNoProgram(t *testing.T) {
	res := verify.Send(context.Background(), nil, verify.Request{URL: "http://127.0.0.1:1/"}, nil)
	if res.Reason != verify.ReasonInvalidRequest || res.Passed {
		t.Fatalf("%+v", res)
	}
}
