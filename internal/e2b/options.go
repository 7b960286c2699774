package e2b

import "github.com/code-sandboxes/code-sandboxes/internal/driver"

// Options are the e2b variant's own settings (E2B's cloud or any
// E2B-compatible host, such as code-sandboxes serve; e2b.Options in the
// public package of that name). Empty values are read as E2B's SDKs do:
// APIKey from $E2B_API_KEY, Domain from $E2B_DOMAIN (default e2b.app),
// APIURL from $E2B_API_URL (default https://api.<domain>), SandboxURL from
// $E2B_SANDBOX_URL, Debug from $E2B_DEBUG=true.
type Options struct {
	APIKey string
	Domain string
	// Template is the E2B template; default code-interpreter-v1 (or Environment).
	Template string
	// AllowInternetAccess applies when NetworkPolicy is empty; nil = false,
	// as NetworkPolicy's default (none) is on every variant.
	AllowInternetAccess *bool
	// Secure asks for an envd access token; nil = true.
	Secure     *bool
	APIURL     string
	SandboxURL string
	Debug      bool
	// ListAll makes List and Get see every sandbox of the team, not only
	// those created by code-sandboxes.
	ListAll bool
}

func optionsOf(spec driver.Spec) (Options, error) { return driver.OptionsOf[Options](spec) }
