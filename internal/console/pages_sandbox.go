// One sandbox's page and what it does: metrics, actions, running code,
// downloading and uploading files.

package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	procpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
)

// sandbox finds the team's sandbox of the request's {id} through the API:
// another team's is "not found" there, and so here.
func (c *Console) sandbox(w http.ResponseWriter, r *http.Request, se *session) (*listed, bool) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		c.errorPage(w, r, se, http.StatusNotFound, "There is no sandbox of that name. Go back to the sandboxes list.")
		return nil, false
	}
	var d listed
	if err := c.b.call(r.Context(), se.key, "GET", "/sandboxes/"+id, nil, &d); err != nil {
		if statusOf(err) == http.StatusNotFound {
			c.errorPage(w, r, se, http.StatusNotFound, "Your team has no sandbox "+id+" (it was killed, timed out, or is another team's). Go back to the sandboxes list.")
		} else {
			c.errorPage(w, r, se, statusOf(err), "Reading sandbox "+id+" failed: "+err.Error())
		}
		return nil, false
	}
	return &d, true
}

func (c *Console) envd(d *listed) *sandboxClient {
	return &sandboxClient{b: c.b, id: d.SandboxID, token: d.EnvdAccessToken}
}

type fileEntry struct {
	Name, Path, Size string
	Dir              bool
}

type detail struct {
	S         *listed
	Network   string
	Age, Left string
	Procs     []procRow
	ProcErr   string
	Dir       string
	Parent    string
	Files     []fileEntry
	FilesErr  string
	Truncated bool
	Ran       *runResult
	Meta      []string
}

type procRow struct {
	PID  uint32
	Cmd  string
	Tag  string
	Cwd  string
	Args string
}

type runResult struct {
	Cmd    string
	Output string
	Exit   string
	Cut    bool
}

func (c *Console) sandboxPage(w http.ResponseWriter, r *http.Request, se *session) {
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	c.renderSandbox(w, r, se, d, nil, http.StatusOK, "", noticeOf(r.URL.Query().Get("done")))
}

func noticeOf(done string) string {
	switch done {
	case "pause":
		return "The sandbox is paused."
	case "resume":
		return "The sandbox is running again."
	case "timeout":
		return "The timeout was set."
	case "snapshot":
		return "A snapshot was taken (see Snapshots)."
	case "upload":
		return "The file was uploaded."
	}
	return ""
}

func (c *Console) renderSandbox(w http.ResponseWriter, r *http.Request, se *session, d *listed, ran *runResult, status int, errMsg, notice string) {
	now := c.now()
	v := detail{S: d, Network: networkOf(d), Age: humanDuration(now.Sub(d.StartedAt)), Left: "—", Ran: ran}
	if d.State == "running" {
		v.Left = humanDuration(d.EndAt.Sub(now))
	}
	for k, val := range d.Metadata {
		v.Meta = append(v.Meta, k+"="+val)
	}
	slices.Sort(v.Meta)
	v.Dir = r.URL.Query().Get("path")
	if v.Dir == "" {
		v.Dir = "/home/user"
	}
	v.Dir = path.Clean("/" + v.Dir)
	if v.Dir != "/" {
		v.Parent = path.Dir(v.Dir)
	}
	if d.State == "running" {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		pc := processconnect.NewProcessClient(c.envd(d), "http://console", connect.WithProtoJSON())
		if res, err := pc.List(ctx, connect.NewRequest(&procpb.ListRequest{})); err != nil {
			v.ProcErr = "Listing the processes failed: " + err.Error()
		} else {
			for _, p := range res.Msg.GetProcesses() {
				cfg := p.GetConfig()
				v.Procs = append(v.Procs, procRow{PID: p.GetPid(), Cmd: cfg.GetCmd(), Args: strings.Join(cfg.GetArgs(), " "), Tag: p.GetTag(), Cwd: cfg.GetCwd()})
			}
		}
		fc := filesystemconnect.NewFilesystemClient(c.envd(d), "http://console", connect.WithProtoJSON())
		if res, err := fc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: v.Dir, Depth: 1})); err != nil {
			v.FilesErr = "Listing " + v.Dir + " failed: " + err.Error() + ". Give a directory that exists in the sandbox."
		} else {
			for _, e := range res.Msg.GetEntries() {
				if len(v.Files) >= maxDirList {
					v.Truncated = true
					break
				}
				v.Files = append(v.Files, fileEntry{Name: e.GetName(), Path: e.GetPath(), Size: humanBytes(e.GetSize()), Dir: e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY})
			}
			slices.SortFunc(v.Files, func(a, b fileEntry) int {
				if a.Dir != b.Dir {
					if a.Dir {
						return -1
					}
					return 1
				}
				return strings.Compare(a.Name, b.Name)
			})
		}
	}
	c.render(w, status, "sandbox.html", page{Title: "Sandbox " + d.SandboxID, Team: se.team, CSRF: se.csrf, Nav: "sandboxes", Error: errMsg, Notice: notice, Data: v})
}

func (c *Console) metricsJSON(w http.ResponseWriter, r *http.Request, se *session) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
		return
	}
	var ms []metric // E2B's answer: the samples in [start, end], here one, taken now
	err := c.b.call(r.Context(), se.key, "GET", "/sandboxes/"+id+"/metrics", nil, &ms)
	if err != nil && statusOf(err) == http.StatusNotFound {
		c.history.forget(id)
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "your team has no sandbox " + id})
		return
	}
	now := c.now()
	if err == nil && len(ms) > 0 {
		m := ms[len(ms)-1]
		c.history.add(se.team, id, point{T: now.UnixMilli(), CPU: m.CPUUsedPct, Mem: m.MemUsed, MemMax: m.MemTotal}, now)
	}
	writeJSON(w, http.StatusOK, map[string]any{"points": c.history.get(se.team, id)})
}

func (c *Console) action(w http.ResponseWriter, r *http.Request, se *session) {
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	id, act := d.SandboxID, r.PathValue("action")
	ctx := r.Context()
	var err error
	switch act {
	case "kill":
		if err = c.b.call(ctx, se.key, "DELETE", "/sandboxes/"+id, nil, nil); err == nil {
			c.history.forget(id)
			http.Redirect(w, r, "/console/?done=kill", http.StatusSeeOther)
			return
		}
	case "pause":
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/pause", nil, nil)
	case "resume":
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/connect", map[string]int{"timeout": 300}, nil)
	case "timeout":
		secs, perr := strconv.Atoi(r.PostFormValue("seconds"))
		if perr != nil || secs < 1 {
			c.renderSandbox(w, r, se, d, nil, http.StatusBadRequest, "Give the new timeout as a whole number of seconds from now, e.g. 600.", "")
			return
		}
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/timeout", map[string]int{"timeout": secs}, nil)
	case "snapshot":
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/snapshots", map[string]string{}, nil)
	case "run":
		c.run(w, r, se, d)
		return
	default:
		c.errorPage(w, r, se, http.StatusNotFound, "There is no action "+act+"; use the buttons of the sandbox's page.")
		return
	}
	if err != nil {
		c.renderSandbox(w, r, se, d, nil, statusOf(err), "The "+act+" failed: "+err.Error(), "")
		return
	}
	http.Redirect(w, r, "/console/sandboxes/"+id+"?done="+act, http.StatusSeeOther)
}

// run runs a command line in the sandbox with bash -lc, as the
// sandbox's default user, and shows its output (bounded) when it ends or
// after runTimeout.
func (c *Console) run(w http.ResponseWriter, r *http.Request, se *session, d *listed) {
	line := r.PostFormValue("cmd")
	if strings.TrimSpace(line) == "" {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadRequest, "Type a command to run, e.g. ls -la.", "")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), runTimeout)
	defer cancel()
	pc := processconnect.NewProcessClient(c.envd(d), "http://console", connect.WithProtoJSON())
	stream, err := pc.Start(ctx, connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", line}}}))
	if err != nil {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadGateway, "Starting the command failed: "+err.Error(), "")
		return
	}
	defer stream.Close()
	res := &runResult{Cmd: line, Exit: "still running after " + runTimeout.String() + " (left running; its output is cut here)"}
	var out bytes.Buffer
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if dt := ev.GetData(); dt != nil {
			b := append(dt.GetStdout(), dt.GetStderr()...)
			if room := maxRunOutput - out.Len(); room < len(b) {
				b, res.Cut = b[:max(room, 0)], true
			}
			out.Write(b)
		}
		if end := ev.GetEnd(); end != nil {
			res.Exit = "exit code " + strconv.Itoa(int(end.GetExitCode()))
			if end.GetError() != "" {
				res.Exit += ": " + end.GetError()
			}
			break
		}
	}
	if err := stream.Err(); err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.Exit = "the stream broke: " + err.Error()
	}
	res.Output = strings.ToValidUTF8(out.String(), "\uFFFD")
	c.renderSandbox(w, r, se, d, res, http.StatusOK, "", "")
}

func (c *Console) download(w http.ResponseWriter, r *http.Request, se *session) {
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		c.errorPage(w, r, se, http.StatusBadRequest, "Say which file to download (the path parameter).")
		return
	}
	req, err := newRequest(r.Context(), "GET", query("/files", "path", p), nil)
	if err != nil {
		c.errorPage(w, r, se, http.StatusBadRequest, "That path can't be downloaded: "+err.Error())
		return
	}
	resp, err := c.envd(d).Do(req)
	if err != nil {
		c.errorPage(w, r, se, http.StatusBadGateway, "Downloading failed: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		c.errorPage(w, r, se, resp.StatusCode, "Downloading "+p+" failed: "+strings.TrimSpace(string(msg)))
		return
	}
	// Always an attachment of an opaque type: a file a sandbox wrote is
	// never rendered on the console's origin (it could be HTML with script).
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+strings.ReplaceAll(urlPathEscape(path.Base(p)), "'", "%27"))
	w.Header().Set("Content-Security-Policy", "default-src 'none'; sandbox")
	_, _ = io.Copy(w, resp.Body)
}

func urlPathEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// upload takes a multipart form whose first part is the CSRF token, then
// the directory, then the file, and streams the file into the sandbox:
// nothing is spooled to the server's disk.
func (c *Console) upload(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		c.checkPost(w, r, "")
		return
	}
	field := func(name string) (string, bool) {
		p, err := mr.NextPart()
		if err != nil || p.FormName() != name {
			return "", false
		}
		b, err := io.ReadAll(io.LimitReader(p, 4<<10))
		return string(b), err == nil
	}
	tok, _ := field("csrf")
	se, ok := c.checkPost(w, r, tok)
	if !ok {
		return
	}
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	dir, ok1 := field("dir")
	part, err := mr.NextPart()
	if !ok1 || err != nil || part.FormName() != "file" || part.FileName() == "" {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadRequest, "Choose a file to upload.", "")
		return
	}
	name := path.Base(part.FileName())
	dest := path.Join(path.Clean("/"+dir), name)
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", name)
		if err == nil {
			_, err = io.Copy(fw, part)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := newRequest(r.Context(), "POST", query("/files", "path", dest), pr)
	if err == nil {
		req.Header.Set("Content-Type", mw.FormDataContentType())
		var resp *http.Response
		if resp, err = c.envd(d).Do(req); err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				err = fmt.Errorf("%d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
			}
		}
	}
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadGateway, "Uploading "+name+" failed: "+err.Error()+". Check that the directory exists and is writable by the sandbox's user.", "")
		return
	}
	http.Redirect(w, r, "/console/sandboxes/"+d.SandboxID+"?done=upload&path="+urlPathEscape(path.Dir(dest)), http.StatusSeeOther)
}
