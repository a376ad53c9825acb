package modelserver

import (
	"reflect"
	"testing"
)

func TestEntities(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []Entity
	}{
		{name: "nothing", text: "Patient seen today.", want: nil},
		{
			name: "names and a date in the order of the text",
			text: "Jane Doe referred John Smith on 2024-03-01; John Smith agreed.",
			want: []Entity{
				{Label: LabelName, Text: "Jane Doe", Start: 0, End: 8, Score: nameScore},
				{Label: LabelName, Text: "John Smith", Start: 18, End: 28, Score: nameScore},
				{Label: LabelDate, Text: "2024-03-01", Start: 32, End: 42, Score: dateScore},
				{Label: LabelName, Text: "John Smith", Start: 44, End: 54, Score: nameScore},
			},
		},
		{
			// Offsets count characters, as the Python service does, not
			// bytes: "é" and "–" are two and three bytes long.
			name: "offsets in characters",
			text: "Née – Maria Garcia",
			want: []Entity{{Label: LabelName, Text: "Maria Garcia", Start: 6, End: 18, Score: nameScore}},
		},
		{name: "a name that is not one of Names", text: "Max Mustermann, 12024-01-01", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Entities(tc.text); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Entities(%q)\n got %+v\nwant %+v", tc.text, got, tc.want)
			}
		})
	}
}
