// Package metricsauth serves the operator's metrics endpoint only to the
// clients the API server authenticates and authorizes, as
// controller-runtime's filters.WithAuthenticationAndAuthorization does,
// with client-go's typed clients alone: that filter builds on
// k8s.io/apiserver, which brings gRPC and OpenTelemetry into the binary and
// costs each operator process memory (docs/decisions.md has the figures).
//
// A request's bearer token is authenticated with a TokenReview, then the
// request is authorized with a SubjectAccessReview for its path (a
// non-resource URL) and its method as the verb. The verdicts are cached as
// controller-runtime configures its authenticator and authorizer: a token
// for a minute, an allowed request for 5 minutes, a denied one for 30
// seconds.
package metricsauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The settings controller-runtime v0.25's filter gives k8s.io/apiserver's
// delegating authenticator and authorizer.
const (
	// tokenTTL is how long a TokenReview's verdict is kept (CacheTTL), an
	// authenticated token or one refused without an error alike.
	tokenTTL = time.Minute
	// allowTTL and denyTTL are how long a SubjectAccessReview's verdict is
	// kept (AllowCacheTTL, DenyCacheTTL): a revoked right still reads for
	// up to 5 minutes, a granted one reads within 30 seconds.
	allowTTL = 5 * time.Minute
	denyTTL  = 30 * time.Second
	// tokenReviewTimeout bounds a token's review, its retries included
	// (TokenAccessReviewTimeout).
	tokenReviewTimeout = 10 * time.Second
)

// retryBackoff spaces the retries of a review the API server could not
// answer for now (WebhookRetryBackoff, apiserver's default).
var retryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// cacheSize bounds each cache. A few scrapers read the endpoint; the bound
// keeps a flood of distinct tokens or paths from growing the operator's
// memory (apiserver's authorizer keeps 8,192 verdicts, its token cache is
// unbounded).
const cacheSize = 1024

// Filter is a metricsserver.Options.FilterProvider: the handler it wraps
// answers 401 to a request without a bearer token or with one the API
// server does not authenticate, 403 to one whose user may not use the
// request's method on its path, and 500 when a review cannot be made. The
// operator needs create on tokenreviews and subjectaccessreviews.
func Filter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("TokenReview client: %w", err)
	}
	authz, err := authorizationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("SubjectAccessReview client: %w", err)
	}
	r, err := newReviewer(authn.TokenReviews(), authz.SubjectAccessReviews(), clock.RealClock{})
	if err != nil {
		return nil, err
	}
	return r.filter, nil
}

// reviewer asks the API server about requests and keeps its verdicts.
type reviewer struct {
	tokenReviews  authenticationclient.TokenReviewInterface
	accessReviews authorizationclient.SubjectAccessReviewInterface
	// tokens maps a token's digest to its user (a nil
	// *authenticationv1.UserInfo when the API server refused it); access
	// maps the digest of a SubjectAccessReview's spec to its status.
	tokens, access *cache.LRUExpireCache
	// digestKey keys the HMAC of the cache keys: a digest cannot be
	// matched against precomputed tokens, and no token is kept.
	digestKey []byte
}

// newReviewer makes a reviewer whose verdicts expire by clock.
func newReviewer(tokens authenticationclient.TokenReviewInterface, access authorizationclient.SubjectAccessReviewInterface, clock cache.Clock) (*reviewer, error) {
	key := make([]byte, sha256.Size)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("cache key: %w", err)
	}
	return &reviewer{
		tokenReviews:  tokens,
		accessReviews: access,
		tokens:        cache.NewLRUExpireCacheWithClock(cacheSize, clock),
		access:        cache.NewLRUExpireCacheWithClock(cacheSize, clock),
		digestKey:     key,
	}, nil
}

// filter is the metricsserver.Filter. Its answers and their texts are
// controller-runtime's, but for a token the API server refuses with an
// error (an expired or forged one): that filter answers 500, this one 401.
func (r *reviewer) filter(log logr.Logger, handler http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, err := r.authenticate(req)
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			log.V(4).Info("Authentication failed")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		status, err := r.authorize(req.Context(), accessReview(user, req))
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !status.Allowed {
			msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
			log.V(4).Info(msg + ": " + status.Reason)
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req)
	}), nil
}

// authenticate returns the user of the request's bearer token, or nil when
// it has none or the API server does not authenticate it. An authenticated
// token is taken off the request, so the handler never sees it.
func (r *reviewer) authenticate(req *http.Request) (*authenticationv1.UserInfo, error) {
	token := bearerToken(req)
	if token == "" {
		return nil, nil
	}
	key := r.digest([]byte(token))
	if v, ok := r.tokens.Get(key); ok {
		return handOn(req, v.(*authenticationv1.UserInfo)), nil
	}
	ctx, cancel := context.WithTimeout(req.Context(), tokenReviewTimeout)
	defer cancel()
	var review *authenticationv1.TokenReview
	err := withRetry(ctx, func() (err error) {
		// No audiences: the token must be one for the API server itself,
		// as controller-runtime's filter, which names none, asks.
		review, err = r.tokenReviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated {
		user = withAuthenticatedGroup(review.Status.User)
	}
	// A refusal with an error is not kept, as apiserver's token cache
	// keeps no error: the token is reviewed again on its next use.
	if user != nil || review.Status.Error == "" {
		r.tokens.Add(key, user, tokenTTL)
	}
	return handOn(req, user), nil
}

// handOn takes the token off req when user is not nil, and returns user.
func handOn(req *http.Request, user *authenticationv1.UserInfo) *authenticationv1.UserInfo {
	if user != nil {
		req.Header.Del("Authorization")
	}
	return user
}

// bearerToken is the token of the request's "Authorization: Bearer" header,
// parsed as the API server parses it: "" when there is none, the header
// names another scheme, or more than one space precedes the token.
func bearerToken(req *http.Request) string {
	parts := strings.SplitN(strings.TrimSpace(req.Header.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") {
		return ""
	}
	return parts[1]
}

// withAuthenticatedGroup adds system:authenticated to the user's groups
// unless the user is anonymous or already in system:authenticated or
// system:unauthenticated, as the API server's authenticators do.
func withAuthenticatedGroup(u authenticationv1.UserInfo) *authenticationv1.UserInfo {
	if u.Username == "system:anonymous" {
		return &u
	}
	for _, g := range u.Groups {
		if g == "system:authenticated" || g == "system:unauthenticated" {
			return &u
		}
	}
	u.Groups = append(u.Groups, "system:authenticated")
	return &u
}

// accessReview asks whether user may use the request's method, lowercased,
// on its path: the API server's verb for a non-resource URL (GET is get,
// POST is post).
func accessReview(user *authenticationv1.UserInfo, req *http.Request) authorizationv1.SubjectAccessReviewSpec {
	var extra map[string]authorizationv1.ExtraValue
	if user.Extra != nil {
		extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	return authorizationv1.SubjectAccessReviewSpec{
		User:                  user.Username,
		UID:                   user.UID,
		Groups:                user.Groups,
		Extra:                 extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: req.URL.Path, Verb: strings.ToLower(req.Method)},
	}
}

// authorize returns the API server's verdict on spec, an error when it
// cannot be had or says both allowed and denied.
func (r *reviewer) authorize(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	status, err := r.accessReview(ctx, spec)
	if err == nil && status.Allowed && status.Denied {
		err = errors.New("SubjectAccessReview: both allowed and denied")
	}
	return status, err
}

// accessReview returns the status of a SubjectAccessReview of spec, kept
// for allowTTL when it allows, denyTTL when not.
func (r *reviewer) accessReview(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	key := r.digest(b)
	if v, ok := r.access.Get(key); ok {
		return v.(authorizationv1.SubjectAccessReviewStatus), nil
	}
	var review *authorizationv1.SubjectAccessReview
	if err := withRetry(ctx, func() (err error) {
		review, err = r.accessReviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	ttl := denyTTL
	if review.Status.Allowed {
		ttl = allowTTL
	}
	r.access.Add(key, review.Status, ttl)
	return review.Status, nil
}

// digest is the keyed SHA-256 of b: a cache key that reveals nothing of b.
func (r *reviewer) digest(b []byte) [sha256.Size]byte {
	h := hmac.New(sha256.New, r.digestKey)
	h.Write(b)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

// withRetry calls call until it succeeds, fails for good or retryBackoff is
// spent, retrying the errors apiserver's webhooks retry: a connection
// reset or lost, an internal error, a timeout, too many requests, or an
// answer that asks to retry later.
func withRetry(ctx context.Context, call func() error) error {
	var err error
	waitErr := wait.ExponentialBackoffWithContext(ctx, retryBackoff, func(context.Context) (bool, error) {
		err = call()
		if err == nil {
			return true, nil
		}
		if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) || apierrors.IsInternalError(err) ||
			apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
			return false, nil
		}
		if _, retry := apierrors.SuggestsClientDelay(err); retry {
			return false, nil
		}
		return false, err
	})
	if err != nil {
		return err
	}
	return waitErr
}
