package verify

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// redacted replaces a secret in a message.
const redacted = "[redacted]"

// redactor removes the request's header values and body from the parts of a
// message that come from outside this package: the answer (a server may echo
// its request, as httpbin's /anything does), transport errors and the
// condition's text. Only verbatim copies can be recognised; a server that
// re-encodes a secret is out of its reach.
type redactor struct {
	// secrets, longest first, so a secret containing another is replaced
	// whole.
	secrets []string
}

func newRedactor(req Request) redactor {
	var r redactor
	for _, values := range req.Header {
		for _, v := range values {
			if v != "" {
				r.secrets = append(r.secrets, v)
			}
		}
	}
	if req.Body != "" {
		r.secrets = append(r.secrets, req.Body)
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

func (r redactor) redact(s string) string {
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}

// part is a redacted, escaped and bounded piece of outside text.
func (r redactor) part(s string) string {
	return truncate(escape(r.redact(s)), maxPartBytes)
}

// snippet quotes the first bytes of an answer's body. Secrets are replaced
// in the whole body before it is cut: a cut must not leave a secret's
// prefix behind, and replacing changes the offsets. (A failed answer is
// rare and at most MaxAnswerBytes, so the cost does not matter.)
func (r redactor) snippet(body []byte) string {
	if len(body) == 0 {
		return "body is empty"
	}
	s := r.redact(string(body))
	more := false
	if len(s) > snippetBytes {
		cut := snippetBytes
		// Cut on a rune boundary (looking back at most one rune).
		for i := 0; i < utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
			cut--
		}
		s, more = s[:cut], true
	}
	out := "body starts " + truncate(escape(s), maxPartBytes)
	if more && !strings.HasSuffix(out, "…") {
		out += "…"
	}
	return out
}

// escape spells non-printable runes and invalid bytes as Go escapes, so a
// message stays one printable line whatever the answer holds.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < utf8.RuneSelf && !unicode.IsPrint(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case !unicode.IsPrint(r):
			if r < 0x10000 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut
// with an ellipsis.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// finish bounds a whole message.
func finish(msg string) string { return truncate(msg, MaxMessageBytes) }
