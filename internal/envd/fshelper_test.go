package envd

import (
	"bufio"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// The filesystem helper's answers come from root inside the sandbox, who may
// write into its pipe: the agent reads bounded lines and parses nothing else.
func TestFSHelperAnswersAreBounded(t *testing.T) {
	long := `{"msg":"` + strings.Repeat("a", maxHelperLine) + `"}` + "\n"
	if _, err := readAnswer(bufio.NewReader(strings.NewReader(long))); err == nil || !strings.Contains(err.Error(), "answer over") {
		t.Errorf("a line over %d bytes: %v, want refused", maxHelperLine, err)
	}
	for _, bad := range []string{"not json\n", "", `{"msg":` + "\n"} {
		if _, err := readAnswer(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("answer %q accepted", bad)
		}
	}
	a, err := readAnswer(bufio.NewReader(strings.NewReader(`{"code":"permission_denied","error":"list /root/x: permission denied"}` + "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var ce *connect.Error
	if err := answerError(a); !errors.As(err, &ce) || ce.Code() != connect.CodePermissionDenied || ce.Message() != "list /root/x: permission denied" {
		t.Errorf("error answer: %v", err)
	}
	if err := answerError(helperAnswer{Code: "no_such_code", Error: "x"}); !errors.As(err, &ce) || ce.Code() != connect.CodeInternal {
		t.Errorf("unknown code: %v, want internal", err)
	}
}
