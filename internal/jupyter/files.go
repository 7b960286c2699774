package jupyter

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// maxFileBytes bounds a file moved through the contents API, which holds a
// whole file base64-encoded in one JSON answer: 64 MiB is 86 MiB on the
// wire, under maxAnswerBytes.
const maxFileBytes = 64 << 20

// maxListEntries bounds a listing (all levels together).
const maxListEntries = 100_000

// model is a contents API model.
type model struct {
	Name         string    `json:"name"`
	Path         string    `json:"path"`
	Type         string    `json:"type"` // file, directory, notebook
	Writable     bool      `json:"writable"`
	LastModified time.Time `json:"last_modified"`
	Size         *int64    `json:"size"`
	Format       string    `json:"format"`
	Content      any       `json:"content"`
}

// contentsPath is the API path of a file, relative to the server's root.
func contentsPath(rel string) string {
	if rel == "" {
		return "/api/contents"
	}
	segs := strings.Split(rel, "/")
	for n, s := range segs {
		segs[n] = url.PathEscape(s)
	}
	return "/api/contents/" + strings.Join(segs, "/")
}

// rel maps a sandbox path to one relative to the server's root: absolute
// paths start at the root, relative ones at the sandbox's directory.
func (c *conf) rel(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: an empty path", sberr.ErrInvalidInput)
	}
	if !strings.HasPrefix(p, "/") {
		p = c.dir + "/" + p
	}
	r, err := cleanRel(p)
	if err != nil {
		return "", fmt.Errorf("%w: %w", sberr.ErrInvalidInput, err)
	}
	return r, nil
}

func (c *conf) stat(ctx context.Context, rel string) (model, error) {
	var m model
	err := c.call(ctx, "stat /"+rel, http.MethodGet, contentsPath(rel)+"?content=0", nil, &m)
	return m, err
}

func (c *conf) readFile(ctx context.Context, rel string) ([]byte, error) {
	var m model
	if err := c.call(ctx, "read /"+rel, http.MethodGet, contentsPath(rel)+"?type=file&format=base64&content=1", nil, &m); err != nil {
		return nil, err
	}
	s, ok := m.Content.(string)
	if !ok || m.Format != "base64" {
		return nil, fmt.Errorf("%w: read /%s: the server sent no base64 content", sberr.ErrUnavailable, rel)
	}
	if base64.StdEncoding.DecodedLen(len(s)) > maxFileBytes+3 {
		return nil, fmt.Errorf("%w: read /%s: larger than %d bytes, the most the jupyter variant moves in one file", sberr.ErrInvalidInput, rel, maxFileBytes)
	}
	b, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(s, "\n", ""))
	if err != nil {
		return nil, fmt.Errorf("%w: read /%s: bad base64 from the server: %w", sberr.ErrUnavailable, rel, err)
	}
	return b, nil
}

// writeFile writes a file (base64, so any bytes), creating its parents.
func (c *conf) writeFile(ctx context.Context, rel string, data []byte) error {
	if rel == "" {
		return fmt.Errorf("%w: write /: a directory", sberr.ErrInvalidInput)
	}
	if d := path.Dir(rel); d != "." {
		if _, err := c.makeDirs(ctx, d); err != nil {
			return err
		}
	}
	body := map[string]any{"type": "file", "format": "base64", "content": base64.StdEncoding.EncodeToString(data)}
	return c.call(ctx, "write /"+rel, http.MethodPut, contentsPath(rel), body, nil)
}

// makeDirs creates rel and its parents; false if it already existed.
func (c *conf) makeDirs(ctx context.Context, rel string) (bool, error) {
	if rel == "" {
		return false, nil
	}
	m, err := c.stat(ctx, rel)
	switch {
	case err == nil && m.Type == "directory":
		return false, nil
	case err == nil:
		return false, fmt.Errorf("%w: /%s exists and is not a directory", sberr.ErrAlreadyExists, rel)
	case !isNotFound(err):
		return false, err
	}
	if d := path.Dir(rel); d != "." {
		if _, err := c.makeDirs(ctx, d); err != nil {
			return false, err
		}
	}
	if err := c.call(ctx, "mkdir /"+rel, http.MethodPut, contentsPath(rel), map[string]any{"type": "directory"}, nil); err != nil {
		return false, err
	}
	return true, nil
}

// list lists a directory down depth levels.
func (c *conf) list(ctx context.Context, rel string, depth int, out *[]model) error {
	var m model
	if err := c.call(ctx, "list /"+rel, http.MethodGet, contentsPath(rel)+"?type=directory&content=1", nil, &m); err != nil {
		return err
	}
	items, _ := m.Content.([]any)
	for _, it := range items {
		e, ok := it.(map[string]any)
		if !ok {
			continue
		}
		var em model
		em.Name, _ = e["name"].(string)
		em.Path, _ = e["path"].(string)
		em.Type, _ = e["type"].(string)
		if s, ok := e["size"].(float64); ok {
			n := int64(s)
			em.Size = &n
		}
		if t, ok := e["last_modified"].(string); ok {
			em.LastModified, _ = time.Parse(time.RFC3339Nano, t)
		}
		em.Writable, _ = e["writable"].(bool)
		if len(*out) >= maxListEntries {
			return fmt.Errorf("%w: list /%s: more than %d entries", sberr.ErrInvalidInput, rel, maxListEntries)
		}
		*out = append(*out, em)
		if em.Type == "directory" && depth > 1 {
			sub, err := cleanRel(em.Path)
			if err != nil {
				continue
			}
			if err := c.list(ctx, sub, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove removes a file or a directory tree; a missing path is not an
// error. The server refuses to delete a directory that isn't empty, so
// its entries go first.
func (c *conf) remove(ctx context.Context, rel string, depth int) error {
	if rel == "" {
		return fmt.Errorf("%w: remove /: refusing to remove the server's root directory", sberr.ErrInvalidInput)
	}
	if depth > 64 {
		return fmt.Errorf("%w: remove /%s: nested deeper than 64 directories", sberr.ErrInvalidInput, rel)
	}
	m, err := c.stat(ctx, rel)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if m.Type == "directory" {
		var entries []model
		if err := c.list(ctx, rel, 1, &entries); err != nil {
			return err
		}
		for _, e := range entries {
			sub, err := cleanRel(e.Path)
			if err != nil || !strings.HasPrefix(sub, rel+"/") {
				return fmt.Errorf("%w: remove /%s: the server listed %q in it", sberr.ErrUnavailable, rel, e.Path)
			}
			if err := c.remove(ctx, sub, depth+1); err != nil {
				return err
			}
		}
	}
	err = c.call(ctx, "remove /"+rel, http.MethodDelete, contentsPath(rel), nil, nil)
	if isNotFound(err) {
		return nil
	}
	return err
}

func (c *conf) move(ctx context.Context, from, to string) (model, error) {
	var m model
	if from == "" || to == "" {
		return m, fmt.Errorf("%w: rename: the server's root directory can't be moved or replaced", sberr.ErrInvalidInput)
	}
	err := c.call(ctx, "rename /"+from, http.MethodPatch, contentsPath(from), map[string]string{"path": to}, &m)
	return m, err
}

// modeOf gives a model's permission bits as far as the API tells them.
func modeOf(m model) os.FileMode {
	mode := os.FileMode(0o444)
	if m.Writable {
		mode |= 0o200
	}
	if m.Type == "directory" {
		mode |= 0o111 | os.ModeDir
	}
	return mode
}
