package pygen_test

import (
	"encoding/json"
	"fmt"

	"github.com/ipybox/ipybox/internal/pygen"
)

func ExampleGenerate() {
	tools := []pygen.Tool{{
		Name:        "read_text_file",
		Description: "Read a text file.",
		InputSchema: json.RawMessage(`{
			"type": "object",
			"properties": {
				"path": {"type": "string"},
				"head": {"type": "integer", "description": "Only the first N lines"}
			},
			"required": ["path"]
		}`),
		OutputSchema: json.RawMessage(`{"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}`),
	}, {
		Name:        "create-relations",
		InputSchema: json.RawMessage(`{"type": "object", "properties": {"relations": {"type": "array", "items": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}}}}}`),
	}}
	files, mods, err := pygen.Generate("fs", tools)
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		fmt.Println(f.Path)
	}
	for _, m := range mods {
		fmt.Printf("%s (%s): %s\n", m.Name, m.Tool, m.Signature)
	}
	// Output:
	// fs/__init__.py
	// fs/create_relations.py
	// fs/read_text_file.py
	// create_relations (create-relations): run(Params(relations: list[Relation] | None = None)) -> str; Relation(from_: str | None = None, to: str | None = None)
	// read_text_file (read_text_file): run(Params(path: str, head: int | None = None)) -> Result
}
