// Time charts with uPlot (vendor/uplot, loaded as the global `uPlot`): lines over rounds,
// quantile bands, and the run's marks (interventions, fork point) as labelled vertical
// lines on every time axis. Each chart container gets `data-rounds` (its point count)
// after each draw.

import { h } from "./dom.js";

export const PALETTE = ["#2271b1", "#d63638", "#00a32a", "#dba617", "#8c5fbf", "#e26f56",
  "#1e8cbe", "#72777c", "#b26200", "#3c434a", "#9ec2e6", "#f2a1a4"];

const BAND = "34,113,177";
// rounds are whole numbers: the round axis ticks at these steps only
const ROUND_STEPS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000,
  10000, 20000, 50000, 100000];

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

function marksPlugin(handle) {
  return {
    hooks: {
      draw: [(u) => {
        const marks = handle.marks || [];
        if (!marks.length) return;
        const dpr = devicePixelRatio || 1;
        const { left, top, width, height } = u.bbox;
        const ctx = u.ctx;
        ctx.save();
        ctx.font = `${Math.round(11 * dpr)}px system-ui, sans-serif`;
        ctx.textAlign = "left";
        ctx.textBaseline = "alphabetic";
        ctx.lineWidth = dpr;
        marks.forEach((m, i) => {
          const x = Math.round(u.valToPos(m.round, "x", true));
          if (!(x >= left - 1 && x <= left + width + 1)) return;
          const c = m.kind === "fork" ? "#8c5fbf" : "#b32d2e";
          ctx.strokeStyle = c;
          ctx.fillStyle = c;
          ctx.setLineDash(m.kind === "fork" ? [2 * dpr, 3 * dpr] : [5 * dpr, 3 * dpr]);
          ctx.beginPath();
          ctx.moveTo(x + 0.5, top);
          ctx.lineTo(x + 0.5, top + height);
          ctx.stroke();
          // (a fork's label names the parent run, said in the page's header already)
          const label = m.kind === "fork" ? "fork" : String(m.label ?? m.kind ?? "");
          const text = label.length > 28 ? label.slice(0, 27) + "…" : label;
          const tw = ctx.measureText(text).width;
          const tx = x + 3 * dpr + tw > left + width ? x - 3 * dpr - tw : x + 3 * dpr;
          ctx.fillText(text, tx, top + (12 + 12 * (i % 3)) * dpr);
        });
        ctx.restore();
      }],
    },
  };
}

// The width of a y axis: its longest tick label and the ticks (uPlot's fixed `size`
// cut labels such as "100,000" on the left).
function axisSize(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1 && axis._size) return axis._size; // (settled: no second measure)
  let size = (axis.ticks && axis.ticks.show !== false ? axis.ticks.size : 0) + (axis.gap || 0);
  const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a),
    "");
  if (longest) {
    u.ctx.save();
    u.ctx.font = axis.font[0];
    size += u.ctx.measureText(longest).width / (devicePixelRatio || 1);
    u.ctx.restore();
  }
  return Math.max(40, Math.ceil(size) + 4);
}

function xRange(u, min, max) {
  if (min === null || max === null) return [0, 1];
  return min === max ? [min - 1, max + 1] : [min, max];
}

function fixedRange(lo, hi) {
  return (u, min, max) => [Math.min(lo, min ?? lo), Math.max(hi, max ?? hi)];
}

// spec: {title, x: [...rounds], series: [{label, values, color?, dash?, width?, scale?}],
//   bands?: [{upper, lower, fill}] (indices into series), y: [lo, hi]?, y2: {label, range}?,
//   marks: [{round,label,kind}], height?}
export function chart(el, spec) {
  const handle = { el, u: null, key: null, marks: spec.marks || [], spec: null, ro: null };
  handle.update = (next) => update(handle, next);
  handle.destroy = () => {
    if (handle.ro) handle.ro.disconnect();
    if (handle.u) handle.u.destroy();
    handle.u = null;
  };
  handle.ro = new ResizeObserver(() => {
    if (!handle.u) return;
    const w = Math.floor(el.clientWidth);
    if (w > 0 && Math.abs(w - handle.u.width) > 2) {
      handle.u.setSize({ width: w, height: handle.spec.height || 220 });
    }
  });
  handle.ro.observe(el);
  update(handle, spec);
  return handle;
}

function keyOf(spec) {
  return JSON.stringify([spec.title, spec.series.map((s) => [s.label, s.scale || "y"]),
    spec.bands || null, spec.y || null, spec.y2 ? spec.y2.label : null, spec.legend]);
}

function update(handle, spec) {
  handle.spec = spec;
  handle.marks = spec.marks || [];
  const data = [spec.x, ...spec.series.map((s) => s.values)];
  const key = keyOf(spec);
  if (handle.u && key === handle.key) {
    handle.u.setData(data);
  } else {
    if (handle.u) handle.u.destroy();
    handle.key = key;
    handle.u = new uPlot(options(handle, spec), data, handle.el);
  }
  handle.el.dataset.rounds = String(spec.x.length);
}

function options(handle, spec) {
  const width = Math.max(240, Math.floor(handle.el.clientWidth || 560));
  const scales = { x: { time: false, range: xRange } };
  const from0 = (u, min, max) => [0, Math.max(1e-3, (max ?? 1) * 1.15)];
  scales.y = spec.y === "from0" ? { range: from0 }
    : spec.y ? { range: fixedRange(spec.y[0], spec.y[1]) } : {};
  const axes = [
    { label: "round", labelSize: 16, size: 34, space: 40, incrs: ROUND_STEPS },
    { size: axisSize, label: spec.yLabel || undefined, labelSize: spec.yLabel ? 16 : undefined },
  ];
  if (spec.y2) {
    // without a range: from 0 to a little above the largest value
    scales.y2 = { range: spec.y2.range ? fixedRange(spec.y2.range[0], spec.y2.range[1])
      : from0 };
    axes.push({ scale: "y2", side: 1, grid: { show: false }, size: axisSize,
      label: spec.y2.label, labelSize: 16 });
  }
  const series = [{ label: "round", value: (u, v) => (v === null || v === undefined ? "–" : v) }];
  spec.series.forEach((s, i) => {
    series.push({
      label: s.label,
      scale: s.scale || "y",
      stroke: s.color || color(i),
      width: s.width ?? 1.6,
      dash: s.dash,
      // points only where a line cannot show (one or two rounds)
      points: { show: (u, si, i0, i1) => !(i1 - i0 >= 2) },
      spanGaps: !!s.spanGaps,
      value: (u, v) => (v === null || v === undefined ? "–" : fmtVal(v)),
    });
  });
  const bands = (spec.bands || []).map((b) => ({
    series: [b.upper + 1, b.lower + 1],
    fill: b.fill || `rgba(${BAND},0.18)`,
  }));
  return {
    title: spec.title,
    width,
    height: spec.height || 220,
    scales,
    axes,
    series,
    bands,
    legend: { show: spec.legend !== false, live: true },
    cursor: { sync: { key: spec.sync || "shoal" }, drag: { x: true, y: false } },
    plugins: [marksPlugin(handle)],
  };
}

function fmtVal(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 0.001 || a >= 1e6)) return v.toExponential(2);
  if (Number.isInteger(v)) return String(v);
  return v.toFixed(a < 1 ? 3 : 2);
}

// The belief distribution of one topic: q05–q95 and q25–q75 bands, the median, the mean.
export function beliefSpec(topic, rounds, b, marks) {
  const fill = (a) => `rgba(${BAND},${a})`;
  const edge = `rgba(${BAND},0.35)`;
  return {
    title: `Beliefs: ${topic}`,
    x: rounds,
    legend: false,
    y: [-1, 1],
    marks,
    series: [
      { label: "q05", values: b.q05 || [], color: edge, width: 1 },
      { label: "q25", values: b.q25 || [], color: edge, width: 1 },
      { label: "q75", values: b.q75 || [], color: edge, width: 1 },
      { label: "q95", values: b.q95 || [], color: edge, width: 1 },
      { label: "median", values: b.q50 || [], color: "#135e96", width: 2.2 },
      { label: "mean", values: b.mean || [], color: "#d63638", width: 1.4, dash: [5, 4] },
    ],
    bands: [
      { upper: 3, lower: 0, fill: fill(0.14) },
      { upper: 2, lower: 1, fill: fill(0.26) },
    ],
  };
}

// {name: values} as line series (in a stable order).
export function linesOf(mapping, { only = null } = {}) {
  return Object.keys(mapping || {})
    .filter((k) => !only || only.includes(k))
    .map((k, i) => ({ label: k, values: mapping[k], color: color(i) }));
}

export function anyValue(values) {
  return (values || []).some((v) => v !== null && v !== undefined && v !== 0);
}

// A chart container (an element of the grid) with an id.
export function box(id, extraClass = "") {
  return h("div.chart", { id, class: extraClass || null });
}

// A set of named charts on one page: made on first `show`, updated in place afterwards.
export class ChartSet {
  constructor() {
    this.charts = new Map();
  }

  show(id, parent, spec) {
    let c = this.charts.get(id);
    if (c && !c.el.isConnected) {
      c.destroy();
      c = null;
    }
    if (!c) {
      let el = document.getElementById(id);
      if (!el) {
        el = box(id);
        parent.append(el);
      }
      c = chart(el, spec);
      this.charts.set(id, c);
    } else {
      c.update(spec);
    }
    return c;
  }

  destroy() {
    for (const c of this.charts.values()) c.destroy();
    this.charts.clear();
  }
}
