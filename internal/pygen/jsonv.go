package pygen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A JSON value as pygen reads a schema: nil, bool, json.Number, string,
// []any or *object. Objects keep their key order, because the order of
// "properties" becomes the order of the generated fields and of the
// signature an agent reads.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[key]
	return v, ok
}

func (o *object) has(key string) bool {
	_, ok := o.get(key)
	return ok
}

// str returns the value of key when it is a string.
func (o *object) str(key string) string {
	v, _ := o.get(key)
	s, _ := v.(string)
	return s
}

// obj returns the value of key when it is an object.
func (o *object) obj(key string) *object {
	v, _ := o.get(key)
	m, _ := v.(*object)
	return m
}

// list returns the value of key when it is an array.
func (o *object) list(key string) []any {
	v, _ := o.get(key)
	l, _ := v.([]any)
	return l
}

// num returns the value of key when it is a number.
func (o *object) num(key string) (json.Number, bool) {
	v, _ := o.get(key)
	n, ok := v.(json.Number)
	return n, ok
}

func (o *object) set(key string, v any) {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

func newObject() *object { return &object{vals: map[string]any{}} }

// maxJSONDepth bounds the nesting of a schema; deeper input is refused
// rather than risking the stack (encoding/json itself stops at 10000).
const maxJSONDepth = 2000

// parseJSON decodes one JSON document, keeping object key order. A
// repeated key keeps its first position and its last value, as
// encoding/json does for maps.
func parseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func readValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := newObject()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				o.set(strings.ToValidUTF8(k, "\uFFFD"), v)
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			l := []any{}
			for dec.More() {
				v, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token() // ']'
			return l, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		return strings.ToValidUTF8(t, "\uFFFD"), nil
	default: // nil, bool, json.Number
		return t, nil
	}
}
