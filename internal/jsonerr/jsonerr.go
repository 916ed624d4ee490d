// Package jsonerr says where in a JSON document a decoding error is: the
// line and column a person opens the file at.
package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// At returns err with the line and column of its offset in data, when it
// is a *json.SyntaxError; else err. (Not a type error: decoders that
// unmarshal parts of data one by one give offsets into the part.)
func At(data []byte, err error) error {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	off := min(max(se.Offset, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - (bytes.LastIndexByte(before, '\n') + 1)
	if col == 0 {
		col = 1
	}
	return fmt.Errorf("line %d, column %d: %w", line, col, err)
}
