// Command quickstart is the README's Go quickstart as a program that compiles
// with the rest of the tree (go vet ./... keeps it honest):
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	_ "github.com/code-sandboxes/code-sandboxes/local" // the local variant
)

func main() {
	ctx := context.Background()
	sb, err := sandboxes.Create(ctx, sandboxes.Config{}) // local variant, network none
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close()

	if _, err := sb.RunCode(ctx, "x = 40"); err != nil {
		log.Fatal(err)
	}
	ex, err := sb.RunCode(ctx, "x + 2")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("x + 2 =", ex.Text()) // 42

	ex, _ = sb.RunCode(ctx, "import numpy as np\nnp.arange(10).sum()")
	fmt.Println("numpy:", ex.Text(), ex.Error)

	ex, _ = sb.RunCode(ctx, "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9]); plt.show()")
	for _, r := range ex.Results {
		if png := r.PNG(); png != nil {
			_ = os.WriteFile("figure.png", png, 0o644)
			fmt.Println("figure.png:", len(png), "bytes")
		}
	}

	ex, _ = sb.RunCode(ctx, "1/0")
	fmt.Println("error:", ex.Error.Name, "success:", ex.Success()) // ZeroDivisionError false
}
