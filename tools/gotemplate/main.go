// Command gotemplate renders Go text/template templates on JSON data, as
// Katalog evaluates its default and override templates against a custom
// resource, so that the expectations of conformance/translation/ cases come
// from Go's own output. It is a tool for writing cases, not part of kmutate.
//
// Input, on stdin: a JSON object {"data": <the CR>, "templates": ["...", ...]}.
// The data is decoded as Kubernetes decodes unstructured objects: integral
// numbers as int64, others as float64. Output: one JSON line per template,
// {"template": T, "output": O} or {"template": T, "error": E}.
//
//	go run ./tools/gotemplate < input.json
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"text/template"
)

type input struct {
	Data      json.RawMessage `json:"data"`
	Templates []string        `json:"templates"`
}

// unstructured turns json.Number into int64 where integral, float64 otherwise.
func unstructured(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		for k, e := range x {
			x[k] = unstructured(e)
		}
		return x
	case []interface{}:
		for i, e := range x {
			x[i] = unstructured(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	default:
		return v
	}
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "input:", err)
		os.Exit(2)
	}
	dec := json.NewDecoder(bytes.NewReader(in.Data))
	dec.UseNumber()
	var data interface{}
	if err := dec.Decode(&data); err != nil {
		fmt.Fprintln(os.Stderr, "data:", err)
		os.Exit(2)
	}
	data = unstructured(data)
	out := json.NewEncoder(os.Stdout)
	for _, t := range in.Templates {
		line := map[string]string{"template": t}
		tmpl, err := template.New("t").Parse(t)
		if err == nil {
			var b bytes.Buffer
			if err = tmpl.Execute(&b, data); err == nil {
				line["output"] = b.String()
			}
		}
		if err != nil {
			line["error"] = err.Error()
		}
		_ = out.Encode(line)
	}
}
