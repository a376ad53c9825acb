package metricsauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// env is the real kube-apiserver that reviews the tokens and requests.
var env *testenv.Environment

func TestMain(m *testing.M) {
	testenv.Main(m, func(e *testenv.Environment) { env = e })
}

// reviewCounter counts the TokenReviews and SubjectAccessReviews sent
// through it and keeps the last SubjectAccessReview's spec. It fails the
// reviews of the resource named by fail without sending them (a
// connection error), and answers the next busy reviews itself with the
// API server's 500 (an internal error, which a client retries).
type reviewCounter struct {
	next http.RoundTripper

	mu     sync.Mutex
	sent   map[string]int
	access authorizationv1.SubjectAccessReviewSpec
	fail   string
	busy   int
}

func (c *reviewCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resource := path.Base(req.URL.Path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if resource == c.fail {
		return nil, errors.New("the API server is out of reach")
	}
	c.sent[resource]++
	if c.busy > 0 {
		c.busy--
		status := apierrors.NewInternalError(errors.New("etcd leader changed")).Status()
		status.APIVersion, status.Kind = "v1", "Status"
		body, err := json.Marshal(status)
		if err != nil {
			return nil, err
		}
		return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(bytes.NewReader(body)), Request: req}, nil
	}
	if resource == "subjectaccessreviews" {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		// In whichever encoding the client chose.
		obj, err := runtime.Decode(scheme.Codecs.UniversalDeserializer(), body)
		if err != nil {
			return nil, err
		}
		c.access = obj.(*authorizationv1.SubjectAccessReview).Spec
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	return c.next.RoundTrip(req)
}

// counted returns the reviews sent since the last call, as
// [TokenReviews, SubjectAccessReviews].
func (c *reviewCounter) counted() [2]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := [2]int{c.sent["tokenreviews"], c.sent["subjectaccessreviews"]}
	clear(c.sent)
	return n
}

// countingClient is a client of the test API server whose requests go
// through a new reviewCounter.
func countingClient(t *testing.T) (*rest.Config, *http.Client, *reviewCounter) {
	t.Helper()
	counter := &reviewCounter{sent: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, hc, counter
}

// serviceAccountToken mints a token of a new ServiceAccount bound to the
// install bundle's ClusterRoles named by roles.
func serviceAccountToken(t *testing.T, name string, roles ...string) string {
	t.Helper()
	ctx := context.Background()
	token, err := localrun.ServiceAccountToken(ctx, env.Client, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	if err := localrun.BindClusterRoles(ctx, env.Client, "default", name, roles...); err != nil {
		t.Fatal(err)
	}
	return token
}

// served is a handler behind the filter: it answers 200 saying whether it
// was handed an Authorization header (servedWithoutToken when not; never
// the token, which a failing test would print).
const servedWithoutToken = "served; Authorization header handed on: false"

func served(t *testing.T, f func(logr.Logger, http.Handler) (http.Handler, error)) http.Handler {
	t.Helper()
	h, err := f(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, "served; Authorization header handed on: %t", req.Header.Get("Authorization") != "")
	}))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// do sends method path with the Authorization header auth ("" sends none)
// and returns the status and the body.
func do(h http.Handler, method, path, auth string) (int, string) {
	req := httptest.NewRequest(method, "https://operator:8443"+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, strings.TrimSpace(w.Body.String())
}

// TestFilter sends requests through the filter to the real API server's
// reviews, advancing the caches' clock: each answer (401 without a token
// or with one the API server refuses, 403 without the right for the
// method on the path, 200 with it), the reviews each request costs (none
// for a verdict kept: a token a minute, an allowed request 5 minutes, a
// denied one 30 seconds; a refused token is reviewed each time, as
// controller-runtime's filter does), the SubjectAccessReview's user and
// verb, and that the handler never sees the token.
func TestFilter(t *testing.T) {
	reader := serviceAccountToken(t, "reader", localrun.MetricsReaderRole)
	unbound := serviceAccountToken(t, "unbound")
	_, hc, counter := countingClient(t)
	authn, err := authenticationclient.NewForConfigAndClient(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	authz, err := authorizationclient.NewForConfigAndClient(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	clock := testingclock.NewFakeClock(time.Now())
	r, err := newReviewer(authn.TokenReviews(), authz.SubjectAccessReviews(), clock)
	if err != nil {
		t.Fatal(err)
	}
	h := served(t, r.filter)

	// What the API server says of the reader's token: the user the
	// SubjectAccessReviews must name.
	review, err := authn.TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: reader}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		t.Fatalf("TokenReview of the reader's token: %v, %+v", err, review.Status)
	}
	readerUser := review.Status.User
	if len(readerUser.Extra) == 0 {
		t.Fatalf("the reader's user has no extra to pass on: %+v", readerUser)
	}
	counter.counted()

	for _, step := range []struct {
		name         string
		advance      time.Duration
		method, path string
		auth         string
		want         int
		body         string
		// reviews are the TokenReviews and SubjectAccessReviews the
		// request costs.
		reviews [2]int
		// verb is the verb of the SubjectAccessReview it sends.
		verb string
	}{
		{name: "no token", path: "/metrics", want: http.StatusUnauthorized, body: "Unauthorized"},
		{name: "another scheme", path: "/metrics", auth: "Basic " + reader, want: http.StatusUnauthorized, body: "Unauthorized"},
		{name: "two spaces before the token", path: "/metrics", auth: "Bearer  " + reader, want: http.StatusUnauthorized, body: "Unauthorized"},
		{name: "a token the API server refuses", path: "/metrics", auth: "Bearer forged", want: http.StatusUnauthorized, body: "Unauthorized", reviews: [2]int{1, 0}},
		{name: "the refused token again", path: "/metrics", auth: "Bearer forged", want: http.StatusUnauthorized, body: "Unauthorized", reviews: [2]int{1, 0}},
		{name: "reader", path: "/metrics", auth: "Bearer " + reader, want: http.StatusOK, body: servedWithoutToken, reviews: [2]int{1, 1}, verb: "get"},
		{name: "reader again, lowercase scheme", path: "/metrics", auth: "bearer " + reader, want: http.StatusOK, body: servedWithoutToken},
		{name: "reader posts", method: http.MethodPost, path: "/metrics", auth: "Bearer " + reader, want: http.StatusForbidden,
			body: "Authorization denied for user " + readerUser.Username, reviews: [2]int{0, 1}, verb: "post"},
		{name: "reader on pprof", path: "/debug/pprof/", auth: "Bearer " + reader, want: http.StatusForbidden, reviews: [2]int{0, 1}, verb: "get"},
		{name: "unbound", path: "/metrics", auth: "Bearer " + unbound, want: http.StatusForbidden, body: "Authorization denied for user system:serviceaccount:default:unbound", reviews: [2]int{1, 1}, verb: "get"},
		{name: "unbound again", path: "/metrics", auth: "Bearer " + unbound, want: http.StatusForbidden},
		{name: "unbound after the denial's 30 s", advance: 31 * time.Second, path: "/metrics", auth: "Bearer " + unbound, want: http.StatusForbidden, reviews: [2]int{0, 1}, verb: "get"},
		{name: "reader within its token's minute", path: "/metrics", auth: "Bearer " + reader, want: http.StatusOK},
		{name: "reader after its token's minute", advance: 30 * time.Second, path: "/metrics", auth: "Bearer " + reader, want: http.StatusOK, reviews: [2]int{1, 0}},
		{name: "reader after the permission's 5 minutes", advance: 4 * time.Minute, path: "/metrics", auth: "Bearer " + reader, want: http.StatusOK, reviews: [2]int{1, 1}, verb: "get"},
	} {
		clock.Step(step.advance)
		method := step.method
		if method == "" {
			method = http.MethodGet
		}
		code, body := do(h, method, step.path, step.auth)
		if code != step.want || (step.body != "" && body != step.body) {
			t.Errorf("%s: %s %s answered %d %q, want %d %q", step.name, method, step.path, code, body, step.want, step.body)
		}
		if got := counter.counted(); got != step.reviews {
			t.Errorf("%s: sent %d TokenReviews and %d SubjectAccessReviews, want %d and %d", step.name, got[0], got[1], step.reviews[0], step.reviews[1])
		}
		if step.reviews[1] == 0 {
			continue
		}
		access := counter.access
		if access.NonResourceAttributes == nil || access.NonResourceAttributes.Path != step.path || access.NonResourceAttributes.Verb != step.verb || access.ResourceAttributes != nil {
			t.Errorf("%s: SubjectAccessReview of %+v, %+v; want the non-resource URL %s, verb %s", step.name, access.NonResourceAttributes, access.ResourceAttributes, step.path, step.verb)
		}
		if !strings.HasPrefix(step.auth, "Bearer "+reader) {
			continue
		}
		want := authorizationv1.SubjectAccessReviewSpec{User: readerUser.Username, UID: readerUser.UID, Groups: readerUser.Groups, Extra: map[string]authorizationv1.ExtraValue{}}
		for k, v := range readerUser.Extra {
			want.Extra[k] = authorizationv1.ExtraValue(v)
		}
		access.NonResourceAttributes = nil
		if !equality.Semantic.DeepEqual(access, want) {
			t.Errorf("%s: SubjectAccessReview for %+v, want the TokenReview's user %+v", step.name, access, want)
		}
	}
}

// TestFilterReviewFails: when a review cannot be made the answer is 500,
// and nothing is kept, so the next request is reviewed again.
func TestFilterReviewFails(t *testing.T) {
	reader := serviceAccountToken(t, "reader", localrun.MetricsReaderRole)
	cfg, hc, counter := countingClient(t)
	f, err := Filter(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	h := served(t, f)
	for _, step := range []struct {
		fail string
		want int
		body string
	}{
		{fail: "tokenreviews", want: http.StatusInternalServerError, body: "Authentication failed"},
		{fail: "subjectaccessreviews", want: http.StatusInternalServerError, body: "Authorization for user system:serviceaccount:default:reader failed"},
		{want: http.StatusOK, body: servedWithoutToken},
	} {
		counter.mu.Lock()
		counter.fail = step.fail
		counter.mu.Unlock()
		if code, body := do(h, http.MethodGet, "/metrics", "Bearer "+reader); code != step.want || body != step.body {
			t.Errorf("with the %s failing: answered %d %q, want %d %q", step.fail, code, body, step.want, step.body)
		}
	}
	// The token was reviewed when the SubjectAccessReview failed and kept,
	// the SubjectAccessReview made only once it could be.
	if got := counter.counted(); got != [2]int{1, 1} {
		t.Errorf("sent %d TokenReviews and %d SubjectAccessReviews, want 1 and 1", got[0], got[1])
	}
}

// TestFilterRetries: a review the API server answers with an internal
// error is sent again after a backoff, as apiserver's webhook clients
// retry, and the request is then answered on its verdict.
func TestFilterRetries(t *testing.T) {
	reader := serviceAccountToken(t, "reader", localrun.MetricsReaderRole)
	cfg, hc, counter := countingClient(t)
	f, err := Filter(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	h := served(t, f)
	counter.mu.Lock()
	counter.busy = 2
	counter.mu.Unlock()
	if code, body := do(h, http.MethodGet, "/metrics", "Bearer "+reader); code != http.StatusOK || body != servedWithoutToken {
		t.Errorf("after two internal errors: answered %d %q, want 200 %q", code, body, servedWithoutToken)
	}
	if got := counter.counted(); got != [2]int{3, 1} {
		t.Errorf("sent %d TokenReviews and %d SubjectAccessReviews, want 3 (two answered 500) and 1", got[0], got[1])
	}
}

// TestWithAuthenticatedGroup: an authenticated user is in
// system:authenticated, as the API server's authenticators put it, unless
// anonymous or already in system:authenticated or system:unauthenticated.
func TestWithAuthenticatedGroup(t *testing.T) {
	for _, tc := range []struct {
		name         string
		groups, want []string
	}{
		{name: "jane", want: []string{"system:authenticated"}},
		{name: "jane", groups: []string{"dev"}, want: []string{"dev", "system:authenticated"}},
		{name: "jane", groups: []string{"system:authenticated", "dev"}, want: []string{"system:authenticated", "dev"}},
		{name: "jane", groups: []string{"system:unauthenticated"}, want: []string{"system:unauthenticated"}},
		{name: "system:anonymous", groups: []string{"dev"}, want: []string{"dev"}},
	} {
		got := withAuthenticatedGroup(authenticationv1.UserInfo{Username: tc.name, Groups: tc.groups})
		if !slices.Equal(got.Groups, tc.want) || got.Username != tc.name {
			t.Errorf("%s in %v: %s in %v, want %v", tc.name, tc.groups, got.Username, got.Groups, tc.want)
		}
	}
}
