package interpreter

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// ToolsPrompt is the system prompt's section in code mode: how to call the
// tools, and each one's Python signature and description.
func ToolsPrompt(tools []sandboxes.Tool) string {
	var b strings.Builder
	b.WriteString("## Tools callable from your code\n\n")
	b.WriteString("Your code can call these functions of the `tools` module (`import tools`). They run outside the sandbox; " +
		"arguments are keyword-only; results come back as Python values decoded from JSON; a failure raises tools.ToolError " +
		"(tools.ToolTimeout, a TimeoutError, when the tool is too slow). Prefer one run_code call that loops over many tool calls, " +
		"filters and joins their results, and prints only what you need, to many small calls.\n\n```python\n")
	sorted := append([]sandboxes.Tool(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, t := range sorted {
		fmt.Fprintf(&b, "tools.%s%s\n", t.Name, Signature(t.InputSchema))
		if d := strings.TrimSpace(t.Description); d != "" {
			fmt.Fprintf(&b, "    \"\"\"%s\"\"\"\n", strings.ReplaceAll(d, "\n", "\n    "))
		}
	}
	b.WriteString("```")
	return b.String()
}

// Signature renders a tool's input schema as a Python signature:
// (*, city: str, days: int = None) -> Any.
func Signature(schema json.RawMessage) string {
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
		} `json:"properties"`
		Required             []string `json:"required"`
		AdditionalProperties any      `json:"additionalProperties"`
	}
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		if s.AdditionalProperties == false {
			return "()"
		}
		return "(**kwargs)"
	}
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	// Required first (as Python wants no default before a default), then by name.
	sort.Slice(names, func(i, j int) bool {
		if req[names[i]] != req[names[j]] {
			return req[names[i]]
		}
		return names[i] < names[j]
	})
	parts := []string{"*"}
	comments := []string{""}
	for _, n := range names {
		p := s.Properties[n]
		ann := pyType(p.Type)
		if len(p.Enum) > 0 {
			lits := make([]string, 0, len(p.Enum))
			for _, e := range p.Enum {
				b, _ := json.Marshal(e)
				lits = append(lits, string(b))
			}
			ann = "Literal[" + strings.Join(lits, ", ") + "]"
		}
		part := n + ": " + ann
		if !req[n] {
			part += " = None"
		}
		parts = append(parts, part)
		comments = append(comments, strings.Join(strings.Fields(p.Description), " "))
	}
	if strings.Join(comments, "") == "" {
		return "(" + strings.Join(parts, ", ") + ")"
	}
	var b strings.Builder
	b.WriteString("(\n")
	for i, p := range parts {
		b.WriteString("        " + p + ",")
		if comments[i] != "" {
			b.WriteString("  # " + comments[i])
		}
		b.WriteString("\n")
	}
	b.WriteString("    )")
	return b.String()
}

func pyType(t any) string {
	switch t := t.(type) {
	case string:
		return map[string]string{"string": "str", "integer": "int", "number": "float", "boolean": "bool",
			"array": "list", "object": "dict", "null": "None"}[t] + orAny(t)
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, pyType(x))
		}
		return strings.Join(out, " | ")
	}
	return "Any"
}

func orAny(t string) string {
	switch t {
	case "string", "integer", "number", "boolean", "array", "object", "null":
		return ""
	}
	return "Any"
}
