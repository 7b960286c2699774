// Code contexts: create, list, delete, restart, interrupt, and their variables.

package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
)

// Context is a code context.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CreateContext creates a kernel context.
func (c *Client) CreateContext(ctx context.Context, language, cwd string) (Context, error) {
	var out Context
	in := map[string]string{}
	if language != "" {
		in["language"] = language
	}
	if cwd != "" {
		in["cwd"] = cwd
	}
	err := c.jsonCall(ctx, "create context", http.MethodPost, c.o.InterpreterURL, "/contexts", c.interpHeaders(), in, &out)
	return out, err
}

// ListContexts lists contexts.
func (c *Client) ListContexts(ctx context.Context) ([]Context, error) {
	var out []Context
	err := c.jsonCall(ctx, "list contexts", http.MethodGet, c.o.InterpreterURL, "/contexts", c.interpHeaders(), nil, &out)
	return out, err
}

// DeleteContext deletes a context and its kernel.
func (c *Client) DeleteContext(ctx context.Context, id string) error {
	return c.jsonCall(ctx, "delete context", http.MethodDelete, c.o.InterpreterURL, "/contexts/"+url.PathEscape(id), c.interpHeaders(), nil, nil)
}

// RestartContext restarts a context's kernel (its state is lost).
func (c *Client) RestartContext(ctx context.Context, id string) error {
	return c.jsonCall(ctx, "restart context", http.MethodPost, c.o.InterpreterURL, "/contexts/"+url.PathEscape(id)+"/restart", c.interpHeaders(), nil, nil)
}

func ctxPath(id string) string {
	if id == "" {
		id = "default"
	}
	return "/x/contexts/" + url.PathEscape(id)
}

// Interrupt interrupts the execution running in a context (our extension).
func (c *Client) Interrupt(ctx context.Context, contextID string) (bool, error) {
	var out struct {
		Interrupted bool `json:"interrupted"`
	}
	err := c.jsonCall(ctx, "interrupt", http.MethodPost, c.o.InterpreterURL, ctxPath(contextID)+"/interrupt", c.interpHeaders(), nil, &out)
	return out.Interrupted, err
}

// GetVariable reads a variable as JSON; isRepr says the value could not be
// encoded as JSON and is its repr string instead.
func (c *Client) GetVariable(ctx context.Context, contextID, name string) (value json.RawMessage, isRepr bool, err error) {
	var out struct {
		Value json.RawMessage `json:"value"`
		Repr  bool            `json:"repr"`
	}
	err = c.jsonCall(ctx, "get variable", http.MethodGet, c.o.InterpreterURL, ctxPath(contextID)+"/variables/"+url.PathEscape(name), c.interpHeaders(), nil, &out)
	return out.Value, out.Repr, err
}

// SetVariable sets a variable from JSON.
func (c *Client) SetVariable(ctx context.Context, contextID, name string, value json.RawMessage) error {
	return c.setVariable(ctx, contextID, name, value, "application/json")
}

// SetVariableBytes sets a variable to a Python bytes object holding value
// (our agent only: the body is the raw bytes, application/octet-stream).
func (c *Client) SetVariableBytes(ctx context.Context, contextID, name string, value []byte) error {
	return c.setVariable(ctx, contextID, name, value, "application/octet-stream")
}

func (c *Client) setVariable(ctx context.Context, contextID, name string, value []byte, contentType string) error {
	resp, err := c.do(ctx, "set variable", http.MethodPut, c.o.InterpreterURL+ctxPath(contextID)+"/variables/"+url.PathEscape(name), c.interpHeaders(), bytes.NewReader(value), contentType)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
