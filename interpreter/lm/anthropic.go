package lm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// DefaultAnthropicModel is used when AnthropicConfig.Model is empty.
const DefaultAnthropicModel = "claude-sonnet-4-5"

// AnthropicConfig configures a client of the Anthropic Messages API.
type AnthropicConfig struct {
	// APIKey defaults to $ANTHROPIC_API_KEY.
	APIKey string
	// BaseURL defaults to $ANTHROPIC_BASE_URL, then https://api.anthropic.com.
	BaseURL string
	// Model defaults to DefaultAnthropicModel.
	Model string
	// NoImages says the model can't see images.
	NoImages bool
	// MaxTokens per answer; DefaultMaxTokens when 0.
	MaxTokens int
	// MaxRetries for transient failures (the SDK's default when 0; -1 for none).
	MaxRetries int
	HTTPClient *http.Client
}

// Anthropic is a Client for the Messages API.
type Anthropic struct {
	client anthropic.Client
	cfg    AnthropicConfig
}

// NewAnthropic returns a Messages API client.
func NewAnthropic(cfg AnthropicConfig) (*Anthropic, error) {
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv("ANTHROPIC_API_KEY")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = os.Getenv("ANTHROPIC_BASE_URL")
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("%w: set ANTHROPIC_API_KEY", ErrNoAPIKey)
	}
	if cfg.Model == "" {
		cfg.Model = DefaultAnthropicModel
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
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
	return &Anthropic{client: anthropic.NewClient(opts...), cfg: cfg}, nil
}

// SupportsImages implements Client.
func (c *Anthropic) SupportsImages() bool { return !c.cfg.NoImages }

func nonEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(no output)"
	}
	return s
}

func anthropicImage(img Image) *anthropic.ImageBlockParam {
	return &anthropic.ImageBlockParam{Source: anthropic.ImageBlockParamSourceUnion{OfBase64: &anthropic.Base64ImageSourceParam{
		Data: base64.StdEncoding.EncodeToString(img.Data), MediaType: anthropic.Base64ImageSourceMediaType(img.MIME)}}}
}

// Complete implements Client.
func (c *Anthropic) Complete(ctx context.Context, req Request) (*Response, error) {
	p := anthropic.MessageNewParams{Model: anthropic.Model(c.cfg.Model), MaxTokens: int64(c.cfg.MaxTokens)}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	// A run of tool messages is one user message of tool_result blocks.
	var results []anthropic.ContentBlockParamUnion
	flush := func() {
		if len(results) > 0 {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(results...))
			results = nil
		}
	}
	for _, m := range req.Messages {
		if m.Role != RoleTool {
			flush()
		}
		switch m.Role {
		case RoleUser:
			blocks := []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock(nonEmpty(m.Text))}
			if !c.cfg.NoImages {
				for _, img := range m.Images {
					blocks = append(blocks, anthropic.ContentBlockParamUnion{OfImage: anthropicImage(img)})
				}
			}
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		case RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if strings.TrimSpace(m.Text) != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				var input any = tc.Arguments
				if !json.Valid(tc.Arguments) {
					input = map[string]any{}
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, input, tc.Name))
			}
			if len(blocks) == 0 {
				blocks = append(blocks, anthropic.NewTextBlock("(no answer)"))
			}
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		case RoleTool:
			tr := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID,
				Content: []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: nonEmpty(m.Text)}}}}
			if m.IsError {
				tr.IsError = anthropic.Bool(true)
			}
			if !c.cfg.NoImages {
				for _, img := range m.Images {
					tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: anthropicImage(img)})
				}
			}
			results = append(results, anthropic.ContentBlockParamUnion{OfToolResult: &tr})
		default:
			return nil, fmt.Errorf("lm: anthropic: unknown role %q", m.Role)
		}
	}
	flush()
	for _, t := range req.Tools {
		schema := anthropic.ToolInputSchemaParam{Properties: t.Parameters["properties"]}
		if r, ok := t.Parameters["required"].([]string); ok {
			schema.Required = r
		}
		tool := anthropic.ToolUnionParamOfTool(schema, t.Name)
		tool.OfTool.Description = anthropic.String(t.Description)
		p.Tools = append(p.Tools, tool)
	}
	msg, err := c.client.Messages.New(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("lm: anthropic messages: %w", err)
	}
	out := &Response{StopReason: string(msg.StopReason)}
	var text []string
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			args := b.Input
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	out.Text = strings.Join(text, "")
	return out, nil
}
