package modelserver

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// The labels a pod finds.
const (
	// LabelName marks a person's name, one of Names.
	LabelName = "NAME"
	// LabelDate marks a date written YYYY-MM-DD.
	LabelDate = "DATE"
)

// Names are the synthetic patients and clinicians a pod recognizes as
// names; no other name is found.
var Names = []string{"John Smith", "Jane Doe", "Maria Garcia", "Wei Zhang", "Amara Okafor"}

// The fixed scores of each label.
const (
	nameScore = 0.98
	dateScore = 0.95
)

// date is what LabelDate finds.
var date = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b`)

// Entity is one entity of an answer to POST /pii/extract.
type Entity struct {
	// Label is the kind of entity: LabelName or LabelDate.
	Label string `json:"label"`
	// Text is the entity as it is in the request's text.
	Text string `json:"text"`
	// Start and End are offsets in characters (Unicode code points, as
	// Python counts them), End exclusive.
	Start int `json:"start"`
	End   int `json:"end"`
	// Score is the model's confidence; answers leave out the entities
	// below the request's confidence_threshold.
	Score float64 `json:"score"`
}

// Entities is what Correct answers for text: every occurrence of one of
// Names (score 0.98) and of a date (0.95), in the order of the text.
func Entities(text string) []Entity {
	var found []Entity
	add := func(label string, score float64, from, to int) {
		found = append(found, Entity{
			Label: label, Text: text[from:to], Score: score,
			Start: utf8.RuneCountInString(text[:from]), End: utf8.RuneCountInString(text[:to]),
		})
	}
	for _, name := range Names {
		for from := 0; ; {
			i := strings.Index(text[from:], name)
			if i < 0 {
				break
			}
			add(LabelName, nameScore, from+i, from+i+len(name))
			from += i + len(name)
		}
	}
	for _, m := range date.FindAllStringIndex(text, -1) {
		add(LabelDate, dateScore, m[0], m[1])
	}
	slices.SortFunc(found, func(a, b Entity) int { return a.Start - b.Start })
	return found
}
