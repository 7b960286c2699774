package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every file in py/ is part of the kernel: one added without listing it in
// kernelParts would be shipped nowhere.
func TestKernelPartsListEveryFile(t *testing.T) {
	files, err := filepath.Glob("py/*.py")
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	src := kernelSource()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(src, string(b)) {
			t.Errorf("%s is not in kernelParts (source.go)", f)
		}
		listed++
	}
	if want := (len(kernelParts) + 1) / 2; listed != want {
		t.Errorf("py/ has %d files, kernelParts %d", listed, want)
	}
	if !isKernelSource([]byte(src)) || isKernelSource([]byte(src[:len(src)-1]+"#")) || isKernelSource([]byte(src+"\n")) {
		t.Error("isKernelSource does not tell the joined source from others")
	}
}
