package docscheck

import (
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	fence   = regexp.MustCompile("(?s)```.*?```")
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inline  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// TestDocLinks follows every relative link of README.md, CHANGELOG.md and
// docs/*.md: the file must exist and, for a Markdown file, the anchor must
// be one of its headings (as GitHub makes anchors of them). Moving a
// section must not leave a link behind.
func TestDocLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	for _, doc := range append(docs(t), "CHANGELOG.md") {
		text := fence.ReplaceAllString(read(t, doc), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			url := m[1]
			if strings.Contains(url, "://") || strings.HasPrefix(url, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(url, "#")
			target := doc
			if file != "" {
				target = path.Clean(path.Join(path.Dir(doc), file))
			}
			if _, err := os.Stat(path.Join(root, target)); err != nil {
				t.Errorf("%s: link %s: %s does not exist", doc, url, target)
				continue
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if cache[target] == nil {
				cache[target] = anchors(read(t, target))
			}
			if !cache[target][anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", doc, url, target, anchor)
			}
		}
	}
}

// anchors are the anchors GitHub gives the headings of a Markdown text:
// lower case, letters, digits, '-' and '_' kept, spaces made '-', the
// rest dropped; a repeated one gets -1, -2, ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		h := strings.ToLower(strings.TrimSpace(inline.ReplaceAllString(m[1], "$1")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
