package jsonerr

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestAt(t *testing.T) {
	for _, c := range []struct {
		doc, want string
	}{
		{"{\n  \"a\": 1,\n  \"b\": ,\n}", "line 3, column 8: invalid character ',' looking for beginning of value"},
		{"{\"a\": 1", "line 1, column 7: unexpected end of JSON input"},
	} {
		var v struct {
			N int `json:"n"`
		}
		err := At([]byte(c.doc), json.Unmarshal([]byte(c.doc), &v))
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: %v, want %s", c.doc, err, c.want)
		}
	}
	other := errors.New("other")
	if got := At(nil, other); got != other {
		t.Errorf("another error: %v, want it unchanged", got)
	}
	var v struct{ N int }
	doc := []byte("{\"N\": \"x\"}")
	if err := json.Unmarshal(doc, &v); At(doc, err) != err {
		t.Errorf("a type error: %v, want it unchanged", At(doc, err))
	}
}
