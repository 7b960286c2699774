package kernel

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// chartOf runs code that shows one figure and returns its e2b/chart JSON,
// decoded; nil if the figure result has none.
func chartOf(t *testing.T, s *Session, code string) map[string]any {
	t.Helper()
	r := exec1(t, s, code)
	noErrors(t, code, r)
	for _, e := range r.results() {
		if _, ok := e.Data["image/png"]; !ok {
			continue
		}
		raw, ok := e.Data["e2b/chart"]
		if !ok {
			return nil
		}
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("chart is not JSON: %v: %s", err, raw)
		}
		return c
	}
	t.Fatalf("no figure in %+v", r.events)
	return nil
}

func pluck(t *testing.T, c map[string]any, key string) []any {
	t.Helper()
	els, _ := c["elements"].([]any)
	out := make([]any, len(els))
	for i, e := range els {
		out[i] = e.(map[string]any)[key]
	}
	return out
}

func allOf(vs []any, typ string) bool {
	for _, v := range vs {
		switch v.(type) {
		case string:
			if typ != "string" {
				return false
			}
		case float64:
			if typ != "number" {
				return false
			}
		default:
			return false
		}
	}
	return len(vs) > 0
}

// E2B's chart JSON for each chart type, from matplotlib figures, next to the PNG.
func TestCharts(t *testing.T) {
	s := newTestSession(t)
	if r := exec1(t, s, "import matplotlib, numpy"); len(r.errors()) > 0 {
		t.Skip("matplotlib/numpy not importable") // install-deps.sh installs them; CI has them
	}

	t.Run("bar", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
plt.figure(figsize=(10, 6))
plt.bar(['Author A', 'Author B', 'Author C'], [100, 200, 300], label='Books Sold')
plt.xlabel('Authors'); plt.ylabel('Number of Books Sold'); plt.title('Book Sales')
plt.show()`)
		if c["type"] != "bar" || c["title"] != "Book Sales" || c["x_label"] != "Authors" || c["x_unit"] != nil || c["y_unit"] != nil {
			t.Fatalf("bar chart: %v", c)
		}
		if got := pluck(t, c, "value"); !reflect.DeepEqual(got, []any{100.0, 200.0, 300.0}) {
			t.Errorf("values %v", got)
		}
		if got := pluck(t, c, "label"); !reflect.DeepEqual(got, []any{"Author A", "Author B", "Author C"}) {
			t.Errorf("labels %v", got)
		}
		if got := pluck(t, c, "group"); !reflect.DeepEqual(got, []any{"Books Sold", "Books Sold", "Books Sold"}) {
			t.Errorf("groups %v", got)
		}
	})

	t.Run("line with dates and units", func(t *testing.T) {
		c := chartOf(t, s, `
import datetime, numpy as np, matplotlib.pyplot as plt
d = [datetime.datetime(2023, 9, 1) + datetime.timedelta(hours=i) for i in range(10)]
plt.plot(d, np.sin(np.arange(10)), label='sin')
plt.plot(d, np.cos(np.arange(10)), label='cos')
plt.xlabel('Time (s)'); plt.ylabel('Amplitude [Hz]'); plt.title('Waves')
plt.show()`)
		if c["type"] != "line" || c["x_scale"] != "datetime" || c["y_scale"] != "linear" || c["x_unit"] != "s" || c["y_unit"] != "Hz" {
			t.Fatalf("line chart: %v", c)
		}
		xt, _ := c["x_ticks"].([]any)
		yt, _ := c["y_ticks"].([]any)
		xl, _ := c["x_tick_labels"].([]any)
		if !allOf(xt, "string") || !allOf(yt, "number") || !allOf(xl, "string") {
			t.Errorf("ticks %v %v %v", xt, yt, xl)
		}
		if got := pluck(t, c, "label"); !reflect.DeepEqual(got, []any{"sin", "cos"}) {
			t.Errorf("labels %v", got)
		}
		pts := c["elements"].([]any)[0].(map[string]any)["points"].([]any)
		if len(pts) != 10 || pts[1].([]any)[0] != "2023-09-01T01:00:00+00:00" {
			t.Errorf("points %v", pts)
		}
	})

	t.Run("log and categorical scales", func(t *testing.T) {
		c := chartOf(t, s, "import numpy as np, matplotlib.pyplot as plt\nplt.plot(np.arange(1, 5), np.exp(np.arange(1, 5)))\nplt.yscale('log')\nplt.show()")
		if c["type"] != "line" || c["y_scale"] != "log" || c["x_scale"] != "linear" {
			t.Fatalf("log: %v", c)
		}
		c = chartOf(t, s, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], ['A', 'B', 'C'])\nplt.show()")
		pts := c["elements"].([]any)[0].(map[string]any)["points"].([]any)
		if c["y_scale"] != "categorical" || pts[2].([]any)[1] != "C" {
			t.Fatalf("categorical: %v", c)
		}
	})

	t.Run("scatter", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
plt.xlabel('A'); plt.ylabel('B')
plt.scatter([1, 2, 3], [4, 5, 6], label='one')
plt.scatter([1, 2], [3, 4], label='two')
plt.show()`)
		if c["type"] != "scatter" || c["title"] != nil || c["x_label"] != "A" {
			t.Fatalf("scatter: %v", c)
		}
		if got := pluck(t, c, "label"); !reflect.DeepEqual(got, []any{"one", "two"}) {
			t.Errorf("labels %v", got)
		}
		if pts := pluck(t, c, "points"); len(pts[0].([]any)) != 3 || len(pts[1].([]any)) != 2 {
			t.Errorf("points %v", pts)
		}
	})

	t.Run("pie", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.pie([90, 10], labels=['No', 'Yes'], autopct='%1.1f%%', startangle=90)
plt.title('Pie')
plt.show()`)
		if c["type"] != "pie" || c["title"] != "Pie" {
			t.Fatalf("pie: %v", c)
		}
		if got := pluck(t, c, "angle"); !reflect.DeepEqual(got, []any{324.0, 36.0}) {
			t.Errorf("angles %v", got)
		}
		if got := pluck(t, c, "radius"); !reflect.DeepEqual(got, []any{1.0, 1.0}) {
			t.Errorf("radii %v", got)
		}
	})

	t.Run("box and whisker", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
data = {'A': [85, 90, 78, 92, 88], 'B': [95, 89, 76, 91, 84, 87]}
fig, ax = plt.subplots()
ax.set_title('Scores'); ax.set_xlabel('Class'); ax.set_ylabel('Score')
ax.boxplot(list(data.values()), patch_artist=True)
ax.set_xticks([1, 2], list(data.keys()))
plt.show()`)
		if c["type"] != "box_and_whisker" || c["title"] != "Scores" {
			t.Fatalf("box: %v", c)
		}
		for key, want := range map[string][]any{
			"label":          {"A", "B"},
			"min":            {78.0, 84.0},
			"first_quartile": {85.0, 84.75},
			"median":         {88.0, 88.0},
			"third_quartile": {90.0, 90.5},
			"max":            {92.0, 95.0},
			"outliers":       {[]any{}, []any{76.0}},
		} {
			if got := pluck(t, c, key); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %v, want %v", key, got, want)
			}
		}
	})

	t.Run("superchart", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
fig, axs = plt.subplots(1, 2)
fig.suptitle('Both')
axs[0].plot([1, 2], [3, 4]); axs[0].set_title('L')
axs[1].scatter([1], [2]); axs[1].set_title('S')
plt.show()`)
		els, _ := c["elements"].([]any)
		if c["type"] != "superchart" || c["title"] != "Both" || len(els) != 2 {
			t.Fatalf("superchart: %v", c)
		}
		if got := pluck(t, c, "type"); !reflect.DeepEqual(got, []any{"line", "scatter"}) {
			t.Errorf("types %v", got)
		}
	})

	t.Run("unknown and blank", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.add_artist(plt.Circle((0, 0), 1, fill=False))
plt.title('Circle')
plt.show()`)
		if c["type"] != "unknown" || c["title"] != "Circle" || len(c["elements"].([]any)) != 0 {
			t.Fatalf("unknown: %v", c)
		}
		if c := chartOf(t, s, "import matplotlib.pyplot as plt\nplt.figure()\nplt.show()"); c != nil {
			t.Fatalf("blank figure has a chart: %v", c)
		}
	})

	t.Run("main result figure", func(t *testing.T) {
		r := exec1(t, s, "import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1, 2])\nfig")
		m := r.main()
		if m == nil {
			t.Fatalf("no main result (%d events)", len(r.events))
		}
		var c struct{ Type string }
		if err := json.Unmarshal(m.Data["e2b/chart"], &c); err != nil || c.Type != "line" || !strings.HasPrefix(str(t, m.Data["image/png"]), "iVBOR") {
			t.Fatalf("main result figure: chart %q (%v)", c.Type, err)
		}
	})
}

// Result.data for DataFrames: {column: values}, NaN and NaT as null,
// timestamps as ISO strings.
func TestDataFrameData(t *testing.T) {
	s := newTestSession(t)
	if r := exec1(t, s, "import pandas"); len(r.errors()) > 0 {
		t.Skip("pandas not importable")
	}
	r := exec1(t, s, `import pandas as pd, numpy as np
pd.DataFrame({"a": [1, 2, np.nan], "t": pd.to_datetime(["2024-01-01", None, "2024-01-03"]), "s": ["x", None, "z"]})`)
	noErrors(t, "DataFrame", r)
	m := r.main()
	if m == nil {
		t.Fatalf("no main result: %+v", r.events)
	}
	var data map[string][]any
	if err := json.Unmarshal(m.Data["e2b/data"], &data); err != nil {
		t.Fatalf("e2b/data %s: %v", m.Data["e2b/data"], err)
	}
	want := map[string][]any{"a": {1.0, 2.0, nil}, "t": {"2024-01-01T00:00:00", nil, "2024-01-03T00:00:00"}, "s": {"x", nil, "z"}}
	if !reflect.DeepEqual(data, want) {
		t.Fatalf("e2b/data = %v, want %v", data, want)
	}
	if _, ok := m.Data["text/html"]; !ok {
		t.Fatal("the DataFrame's HTML is gone")
	}
}

// PIL images: show() and save() to a path display the image (as E2B's
// code interpreter does), and an image as the last expression is a PNG.
func TestPILImages(t *testing.T) {
	s := newTestSession(t)
	if r := exec1(t, s, "import PIL.Image"); len(r.errors()) > 0 {
		t.Skip("PIL not importable")
	}
	for _, code := range []string{
		"from PIL import Image\nim = Image.new('RGBA', (4, 4))\nim.show()\nprint('done')",
		"from PIL import Image\nImage.new('RGB', (4, 4))",
		"from PIL import Image\nimport os, tempfile\nImage.new('RGB', (4, 4)).save(os.path.join(tempfile.mkdtemp(), 't.png'))",
	} {
		r := exec1(t, s, code)
		noErrors(t, code, r)
		res := r.results()
		if len(res) != 1 || !strings.HasPrefix(str(t, res[0].Data["image/png"]), "iVBOR") {
			t.Errorf("%q: want one PNG result, got %d results", code, len(res))
		}
	}
}
