// Command codemode shows "code mode": instead of calling tools one by one
// through the model's context, the model writes code that calls them from
// the sandbox — loops, filters and joins happen there. It runs with no API
// key: the model is scripted (swap in lm.NewOpenAI or lm.NewAnthropic for a
// real one).
//
//	go run ./examples/codemode
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/interpreter"
	"github.com/code-sandboxes/code-sandboxes/interpreter/lm"
	_ "github.com/code-sandboxes/code-sandboxes/local" // the local variant
)

// The host's data, which the sandbox (network none) reaches only through
// the tools granted below.
var orders = map[string][]order{
	"alice": {{"book", 1200}, {"lamp", 3400}},
	"bob":   {{"pen", 150}},
	"carol": {{"desk", 25000}, {"chair", 9900}, {"mug", 800}},
}

type order struct {
	Item  string `json:"item"`
	Cents int    `json:"cents"`
}

type customerIn struct {
	Customer string `json:"customer" jsonschema:"the customer's name"`
}

// scripted is a model that answers from a script: first a run_code call,
// then, having read the output, the final answer.
type scripted struct{ step int }

func (m *scripted) SupportsImages() bool { return false }

func (m *scripted) Complete(ctx context.Context, req lm.Request) (*lm.Response, error) {
	m.step++
	if m.step == 1 {
		// What a model sees: the signatures in the system prompt.
		fmt.Println("--- the system prompt's tools section ---")
		fmt.Println(req.System[strings.Index(req.System, "## Tools"):])
		code := `import tools
totals = {c: sum(o["cents"] for o in tools.orders(customer=c)) for c in tools.customers()}
best = max(totals, key=totals.get)
print(best, totals[best] / 100)`
		args, _ := json.Marshal(map[string]string{"code": code})
		return &lm.Response{ToolCalls: []lm.ToolCall{{ID: "call_1", Name: req.Tools[0].Name, Arguments: args}}}, nil
	}
	last := req.Messages[len(req.Messages)-1].Text
	fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(last[strings.Index(last, "\n")+1:]), "status: success"))
	return &lm.Response{Text: fmt.Sprintf("The best customer is %s, with %s in orders.", fields[0], fields[1])}, nil
}

func main() {
	ctx := context.Background()
	customers, err := sandboxes.NewTool("customers", "The names of all customers.",
		func(ctx context.Context, _ struct{}) ([]string, error) {
			var names []string
			for n := range orders {
				names = append(names, n)
			}
			return names, nil
		})
	if err != nil {
		log.Fatal(err)
	}
	ordersTool, err := sandboxes.NewTool("orders", "A customer's orders: [{item, cents}].",
		func(ctx context.Context, in customerIn) ([]order, error) {
			o, ok := orders[in.Customer]
			if !ok {
				return nil, fmt.Errorf("no customer %q", in.Customer)
			}
			return o, nil
		})
	if err != nil {
		log.Fatal(err)
	}

	sb, err := interpreter.Create(ctx, sandboxes.Config{}) // local, network none
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Terminate()

	it := interpreter.NewCodeMode(sb, &scripted{}, customers, ordersTool)
	it.OnExecution = func(r interpreter.CodeExecResult) {
		fmt.Printf("--- run_code ---\n%s\n--- output ---\n%s\n", r.Code, r.Output)
	}
	out, err := it.Execute(ctx, "Which customer spent the most?", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("--- answer ---")
	fmt.Println(out.Text)
}
