// The agent's own calls: its info, lifetime and idle timeouts, warm-up and shutdown.

package client

import (
	"context"
	"net/http"
	"time"
)

// AgentInfo is GET /x/info.
type AgentInfo struct {
	ID        string    `json:"id"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	EndAt     time.Time `json:"end_at"`
	LastUsed  time.Time `json:"last_used"`
	Contexts  int       `json:"contexts"`
}

// Info asks our agent about itself.
func (c *Client) Info(ctx context.Context) (AgentInfo, error) {
	var out AgentInfo
	err := c.jsonCall(ctx, "info", http.MethodGet, c.o.EnvdURL, "/x/info", c.EnvdHeaders(), nil, &out)
	return out, err
}

// SetTimeout restarts the agent's lifetime countdown from now.
func (c *Client) SetTimeout(ctx context.Context, d time.Duration) (AgentInfo, error) {
	var out AgentInfo
	err := c.jsonCall(ctx, "set timeout", http.MethodPost, c.o.EnvdURL, "/x/timeout", c.EnvdHeaders(), map[string]float64{"timeout": d.Seconds()}, &out)
	return out, err
}

// SetIdleTimeout sets (or changes) how long the sandbox may stay unused
// before it ends itself (our agent only).
func (c *Client) SetIdleTimeout(ctx context.Context, d time.Duration) (AgentInfo, error) {
	var out AgentInfo
	err := c.jsonCall(ctx, "set idle timeout", http.MethodPost, c.o.EnvdURL, "/x/timeout", c.EnvdHeaders(), map[string]float64{"idle_timeout": d.Seconds()}, &out)
	return out, err
}

// SetTimeouts restarts the lifetime countdown with d and sets the idle
// timeout to idle (0 leaves it), in one call (our agent only).
func (c *Client) SetTimeouts(ctx context.Context, d, idle time.Duration) (AgentInfo, error) {
	body := map[string]float64{"timeout": d.Seconds()}
	if idle > 0 {
		body["idle_timeout"] = idle.Seconds()
	}
	var out AgentInfo
	err := c.jsonCall(ctx, "set timeouts", http.MethodPost, c.o.EnvdURL, "/x/timeout", c.EnvdHeaders(), body, &out)
	return out, err
}

// Warm starts the default python kernel, or waits for its start in
// progress (the warm pool calls it before counting a sandbox as ready).
func (c *Client) Warm(ctx context.Context) error {
	return c.jsonCall(ctx, "warm the default kernel", http.MethodPost, c.o.EnvdURL, "/x/warm", c.EnvdHeaders(), nil, nil)
}

// Shutdown asks the agent to end the sandbox.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.jsonCall(ctx, "shutdown", http.MethodPost, c.o.EnvdURL, "/x/shutdown", c.EnvdHeaders(), nil, nil)
}
