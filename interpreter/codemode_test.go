package interpreter_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/interpreter"
	"github.com/code-sandboxes/code-sandboxes/local"
)

func TestSignature(t *testing.T) {
	for schema, want := range map[string]string{
		``: `(**kwargs)`,
		`{"type":"object","additionalProperties":false}`:                                                          `()`,
		`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}`: `(*, city: str, days: int = None)`,
		`{"type":"object","properties":{"unit":{"enum":["c","f"]}}}`:                                              `(*, unit: Literal["c", "f"] = None)`,
		`{"type":"object","properties":{"q":{"type":"string","description":"what to find"}},"required":["q"]}`:    "(\n        *,\n        q: str,  # what to find\n    )",
	} {
		if got := interpreter.Signature(json.RawMessage(schema)); got != want {
			t.Errorf("Signature(%s) = %q, want %q", schema, got, want)
		}
	}
}

// TestCodeMode: the model gets run_code, sees the tools' signatures in the
// system prompt, and its one execution calls a tool 100 times in a loop,
// keeping the results out of the model's context.
func TestCodeMode(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a sandbox")
	}
	type priceIn struct {
		Item string `json:"item" jsonschema:"the item's name"`
	}
	var calls atomic.Int64
	price, err := sandboxes.NewTool("price", "The price of an item, in cents.", func(ctx context.Context, in priceIn) (int, error) {
		calls.Add(1)
		return len(in.Item) * 100, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			sb, err := interpreter.Create(ctx, sandboxes.Config{Options: local.Options{RuntimeDir: t.TempDir()}})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Terminate()
			code := "import tools\nprint(sum(tools.price(item='x' * i) for i in range(100)))"
			fm := newFakeModel(t, p, turn{code: code}, turn{expect: "495000", text: "The total is 4950.00."})
			fm.tool = "run_code"
			before := calls.Load()
			out, err := interpreter.NewCodeMode(sb, fm.client(t), price).Execute(ctx, "What do 100 items cost?", nil)
			fm.check()
			if err != nil {
				t.Fatal(err)
			}
			if out.Text != "The total is 4950.00." || len(out.Executions) != 1 {
				t.Errorf("text %q, %d executions", out.Text, len(out.Executions))
			}
			if n := calls.Load() - before; n != 100 {
				t.Errorf("the tool ran %d times, want 100", n)
			}
			if !strings.Contains(fm.lastBody, `tools.price(\n        *,\n        item: str,  # the item's name\n    )`) || !strings.Contains(fm.lastBody, "The price of an item, in cents.") {
				t.Errorf("the system prompt lacks the tool's signature:\n%s", fm.lastBody)
			}
		})
	}
}
