package lm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// OpenAIConfig configures a client of the OpenAI chat-completions API, or of
// any server that speaks it (vLLM, Ollama, llama.cpp's llama-server, …).
type OpenAIConfig struct {
	// APIKey defaults to $OPENAI_API_KEY. A server at a custom BaseURL may
	// need none.
	APIKey string
	// BaseURL defaults to $OPENAI_BASE_URL, then https://api.openai.com/v1.
	BaseURL string
	// Model is required, e.g. gpt-4o, or the name a local server serves.
	Model string
	// NoImages says the model can't see images: figures are described in
	// text instead of sent.
	NoImages bool
	// MaxTokens, when set, is sent as max_completion_tokens.
	MaxTokens int
	// MaxRetries for transient failures (the SDK's default when 0; -1 for none).
	MaxRetries int
	HTTPClient *http.Client
}

// OpenAI is a Client for the chat-completions API.
type OpenAI struct {
	client openai.Client
	cfg    OpenAIConfig
}

// NewOpenAI returns a chat-completions client.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = os.Getenv("OPENAI_BASE_URL")
	}
	if cfg.Model == "" {
		return nil, fmt.Errorf("lm: openai: a model name is required")
	}
	if cfg.APIKey == "" {
		if cfg.BaseURL == "" {
			return nil, fmt.Errorf("%w: set OPENAI_API_KEY (or a base URL of a server that needs none)", ErrNoAPIKey)
		}
		cfg.APIKey = "none" // local servers ignore it; the SDK wants one
	}
	opts := []option.RequestOption{
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(limitedHTTPClient(cfg.HTTPClient, MaxResponseBytes)),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	switch {
	case cfg.MaxRetries < 0:
		opts = append(opts, option.WithMaxRetries(0))
	case cfg.MaxRetries > 0:
		opts = append(opts, option.WithMaxRetries(cfg.MaxRetries))
	}
	return &OpenAI{client: openai.NewClient(opts...), cfg: cfg}, nil
}

// SupportsImages implements Client.
func (c *OpenAI) SupportsImages() bool { return !c.cfg.NoImages }

func dataURL(img Image) string {
	return "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}

// Complete implements Client.
func (c *OpenAI) Complete(ctx context.Context, req Request) (*Response, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(c.cfg.Model)}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	// Tool messages carry text only: the images of a run of tool messages
	// follow it in one user message.
	var pending []openai.ChatCompletionContentPartUnionParam
	flush := func() {
		if len(pending) > 0 {
			parts := append([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("Images produced by the code above:")}, pending...)
			p.Messages = append(p.Messages, openai.UserMessage(parts))
			pending = nil
		}
	}
	for _, m := range req.Messages {
		if m.Role != RoleTool {
			flush()
		}
		switch m.Role {
		case RoleUser:
			if len(m.Images) == 0 || c.cfg.NoImages {
				p.Messages = append(p.Messages, openai.UserMessage(m.Text))
				continue
			}
			parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(m.Text)}
			for _, img := range m.Images {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: dataURL(img)}))
			}
			p.Messages = append(p.Messages, openai.UserMessage(parts))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" {
				a.Content.OfString = openai.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: string(tc.Arguments)}}})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Text, m.ToolCallID))
			if !c.cfg.NoImages {
				for _, img := range m.Images {
					pending = append(pending, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: dataURL(img)}))
				}
			}
		default:
			return nil, fmt.Errorf("lm: openai: unknown role %q", m.Role)
		}
	}
	flush()
	for _, t := range req.Tools {
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: shared.FunctionParameters(t.Parameters)}))
	}
	if n := req.MaxTokens; n > 0 {
		p.MaxCompletionTokens = openai.Int(int64(n))
	} else if c.cfg.MaxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(int64(c.cfg.MaxTokens))
	}
	resp, err := c.client.Chat.Completions.New(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("lm: openai chat completion: %w", err)
	}
	if len(resp.Choices) == 0 {
		return nil, fmt.Errorf("%w: openai: no choices in the response", ErrInvalidResponse)
	}
	ch := resp.Choices[0]
	out := &Response{Text: ch.Message.Content, StopReason: string(ch.FinishReason)}
	if out.Text == "" && ch.Message.Refusal != "" {
		out.Text = ch.Message.Refusal
	}
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		args := strings.TrimSpace(tc.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(args)})
	}
	return out, nil
}
