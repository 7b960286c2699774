// The console's script: live updates of the sandboxes list and the
// sandbox's chart. It builds the DOM with textContent only, never HTML from
// data: everything here comes from sandboxes, which may be hostile.
"use strict";
(function () {
  function el(tag, text, attrs) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }

  // Every form that asks first (kill).
  document.addEventListener("submit", function (ev) {
    var q = ev.target.getAttribute("data-confirm");
    if (q && !window.confirm(q)) ev.preventDefault();
  });

  var table = document.getElementById("sandboxes");
  if (table) {
    var src = table.getAttribute("data-live");
    var tick = function () {
      fetch(src, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          if (r.status === 401) { window.location.assign("/console/login"); throw new Error("signed out"); }
          if (!r.ok) throw new Error("the server answered " + r.status);
          return r.json();
        })
        .then(function (j) {
          var body = table.tBodies[0];
          var rows = document.createDocumentFragment();
          (j.sandboxes || []).forEach(function (s) {
            var tr = el("tr", null, { "data-id": s.id });
            var td = el("td");
            td.appendChild(el("a", s.id, { href: "/console/sandboxes/" + encodeURIComponent(s.id) }));
            tr.appendChild(td);
            var st = el("td");
            st.appendChild(el("span", s.state, { "class": "state " + (s.state === "running" || s.state === "paused" ? s.state : "") }));
            tr.appendChild(st);
            [s.template, s.age, s.left, s.network, s.cpu, s.memory].forEach(function (v) { tr.appendChild(el("td", v)); });
            rows.appendChild(tr);
          });
          body.replaceChildren(rows);
          document.getElementById("count").textContent = String((j.sandboxes || []).length);
          document.getElementById("none").hidden = (j.sandboxes || []).length > 0;
          document.getElementById("live").textContent = "";
        })
        .catch(function (e) {
          document.getElementById("live").textContent = "(live update failed: " + e.message + "; retrying)";
        });
    };
    setInterval(tick, 3000);
  }

  var chart = document.getElementById("chart");
  if (chart) {
    var NS = "http://www.w3.org/2000/svg";
    var W = 800, H = 220, P = 30;
    var svgEl = function (tag, attrs) {
      var e = document.createElementNS(NS, tag);
      for (var k in attrs) e.setAttribute(k, attrs[k]);
      return e;
    };
    var draw = function (pts) {
      var svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, "aria-hidden": "true" });
      svg.appendChild(svgEl("line", { x1: P, y1: H - P, x2: W - 5, y2: H - P, stroke: "#999" }));
      svg.appendChild(svgEl("line", { x1: P, y1: 5, x2: P, y2: H - P, stroke: "#999" }));
      if (pts.length > 0) {
        var t0 = pts[0].t, t1 = Math.max(pts[pts.length - 1].t, t0 + 1);
        var memMax = 1;
        pts.forEach(function (p) { memMax = Math.max(memMax, p.memMax || p.mem); });
        var x = function (t) { return P + (W - P - 5) * (t - t0) / (t1 - t0); };
        var y = function (f) { return (H - P) - (H - P - 5) * Math.min(1, Math.max(0, f)); };
        var line = function (f, color, id) {
          var d = pts.map(function (p) { return x(p.t).toFixed(1) + "," + y(f(p)).toFixed(1); }).join(" ");
          if (pts.length === 1) d += " " + (x(pts[0].t) + 4).toFixed(1) + "," + y(f(pts[0])).toFixed(1);
          svg.appendChild(svgEl("polyline", { points: d, fill: "none", stroke: color, "stroke-width": 2, id: id }));
        };
        line(function (p) { return p.cpu / 100; }, "#0b4fa8", "cpu-line");
        line(function (p) { return p.mem / memMax; }, "#b3470b", "mem-line");
        var lbl = svgEl("text", { x: P + 4, y: 16, "font-size": 12, fill: "#333" });
        lbl.textContent = "100% CPU · " + (memMax / 1048576).toFixed(0) + " MiB";
        svg.appendChild(lbl);
        var last = pts[pts.length - 1];
        document.getElementById("now").textContent = "Now: CPU " + last.cpu.toFixed(0) + "%, memory " +
          (last.mem / 1048576).toFixed(0) + " MiB of " + (last.memMax / 1048576).toFixed(0) + " MiB (" + pts.length + " samples)";
      }
      var legend = el("p", null, { "class": "legend" });
      legend.appendChild(el("span", "CPU % of its limit", { "class": "cpu" }));
      legend.appendChild(el("span", "Memory used", { "class": "mem" }));
      chart.replaceChildren(svg, legend);
      chart.setAttribute("data-samples", String(pts.length));
      if (pts.length) chart.setAttribute("data-mem-last", String(pts[pts.length - 1].mem));
    };
    var poll = function () {
      fetch(chart.getAttribute("data-src"), { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error("the server answered " + r.status); return r.json(); })
        .then(function (j) { draw(j.points || []); })
        .catch(function (e) { document.getElementById("now").textContent = "Metrics unavailable: " + e.message; });
    };
    poll();
    setInterval(poll, 2500);
  }
})();
