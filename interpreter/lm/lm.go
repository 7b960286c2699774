// Package lm is the language-model side of the code interpreter: a small,
// provider-neutral chat interface with tool calling, and clients for the
// OpenAI-compatible chat-completions API (OpenAI, vLLM, Ollama, llama.cpp
// servers, …) and the Anthropic Messages API, built on their official Go SDKs.
//
// Another provider plugs in by implementing Client.
package lm

import (
	"context"
	"encoding/json"
	"errors"
)

// Role is who wrote a message.
type Role string

// The roles of a conversation.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool is the output of a tool call, answering ToolCallID.
	RoleTool Role = "tool"
)

// Image is an image shown to the model.
type Image struct {
	MIME string // image/png, image/jpeg, image/gif or image/webp
	Data []byte
}

// ToolCall is the model asking to run a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage // a JSON object
}

// Message is one turn of the conversation.
type Message struct {
	Role Role
	Text string
	// Images go with user and tool messages; a client whose model can't see
	// images (Client.SupportsImages false) drops them.
	Images []Image
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall
	// ToolCallID says which call a tool message answers.
	ToolCallID string
	// IsError marks a tool message whose call failed.
	IsError bool
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments (an object schema).
	Parameters map[string]any
}

// Request is one call to the model.
type Request struct {
	System    string
	Messages  []Message
	Tools     []Tool
	MaxTokens int // 0: the client's default
}

// Response is the model's answer: text, tool calls, or both.
type Response struct {
	Text      string
	ToolCalls []ToolCall
	// StopReason is the provider's own word (stop, tool_calls, end_turn,
	// tool_use, length, max_tokens…).
	StopReason string
}

// Client is a chat model with tool calling.
type Client interface {
	Complete(ctx context.Context, req Request) (*Response, error)
	// SupportsImages says whether images in messages reach the model.
	SupportsImages() bool
}

// ErrNoAPIKey is returned by the constructors when no key was given and none
// is in the environment.
var ErrNoAPIKey = errors.New("lm: no API key")

// ErrInvalidResponse is returned when the model's answer can't be used.
var ErrInvalidResponse = errors.New("lm: invalid response")

// DefaultMaxTokens bounds a single answer when Request.MaxTokens is 0.
const DefaultMaxTokens = 4096

// MaxResponseBytes bounds what a client reads of one HTTP response.
const MaxResponseBytes = 16 << 20
