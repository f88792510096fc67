// A fast force-directed layout (Fruchterman–Reingold, repulsion only between nodes in
// neighbouring grid cells) for graphs of a few thousand nodes, whose positions cytoscape
// then shows as a `preset` layout: cytoscape's own cose takes tens of seconds at 1,000
// nodes, this takes a fraction of one. Deterministic: the start positions come from the
// node ids, so the same graph is drawn the same way each time.

function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return (h >>> 0) / 4294967296;
}

// ids: node ids (strings); edges: [[a, b], ...] of ids. Returns {id: {x, y}}.
export function forceLayout(ids, edges, { iterations = 0 } = {}) {
  const n = ids.length;
  const out = {};
  if (!n) return out;
  const index = new Map(ids.map((id, i) => [id, i]));
  const k = 40; // the ideal distance between neighbours
  const side = Math.sqrt(n) * k * 1.2;
  const x = new Float64Array(n);
  const y = new Float64Array(n);
  const dx = new Float64Array(n);
  const dy = new Float64Array(n);
  ids.forEach((id, i) => {
    const a = hash(`a${id}`) * 2 * Math.PI;
    const r = Math.sqrt(hash(`r${id}`)) * side / 2;
    x[i] = r * Math.cos(a);
    y[i] = r * Math.sin(a);
  });
  const links = [];
  for (const [a, b] of edges) {
    const i = index.get(String(a));
    const j = index.get(String(b));
    if (i !== undefined && j !== undefined && i !== j) links.push(i, j);
  }
  const iters = iterations || (n > 3000 ? 80 : n > 1000 ? 120 : 200);
  const cell = 3 * k; // (repulsion reaches this far)
  let temp = side / 8;
  const cool = temp / (iters + 1);
  for (let it = 0; it < iters; it++) {
    dx.fill(0);
    dy.fill(0);
    // repulsion between nodes of neighbouring cells
    const grid = new Map();
    for (let i = 0; i < n; i++) {
      const key = `${Math.floor(x[i] / cell)},${Math.floor(y[i] / cell)}`;
      let c = grid.get(key);
      if (!c) grid.set(key, (c = []));
      c.push(i);
    }
    for (let i = 0; i < n; i++) {
      const gx = Math.floor(x[i] / cell);
      const gy = Math.floor(y[i] / cell);
      for (let ox = -1; ox <= 1; ox++) {
        for (let oy = -1; oy <= 1; oy++) {
          const c = grid.get(`${gx + ox},${gy + oy}`);
          if (!c) continue;
          for (const j of c) {
            if (j <= i) continue;
            let ddx = x[i] - x[j];
            let ddy = y[i] - y[j];
            let d2 = ddx * ddx + ddy * ddy;
            if (d2 < 1e-6) {
              ddx = (hash(`${i}:${j}`) - 0.5) * 0.1;
              ddy = (hash(`${j}:${i}`) - 0.5) * 0.1;
              d2 = ddx * ddx + ddy * ddy;
            }
            if (d2 > cell * cell) continue;
            const f = (k * k) / d2; // (k²/d) along the unit vector
            dx[i] += ddx * f;
            dy[i] += ddy * f;
            dx[j] -= ddx * f;
            dy[j] -= ddy * f;
          }
        }
      }
    }
    // attraction along follows
    for (let e = 0; e < links.length; e += 2) {
      const i = links[e];
      const j = links[e + 1];
      const ddx = x[i] - x[j];
      const ddy = y[i] - y[j];
      const d = Math.sqrt(ddx * ddx + ddy * ddy) || 1e-3;
      const f = d / k; // (d²/k) along the unit vector
      dx[i] -= ddx * f;
      dy[i] -= ddy * f;
      dx[j] += ddx * f;
      dy[j] += ddy * f;
    }
    // a weak pull to the centre keeps loose parts in view
    for (let i = 0; i < n; i++) {
      dx[i] -= x[i] * 0.01;
      dy[i] -= y[i] * 0.01;
      const d = Math.sqrt(dx[i] * dx[i] + dy[i] * dy[i]);
      if (d > 0) {
        const step = Math.min(d, temp);
        x[i] += (dx[i] / d) * step;
        y[i] += (dy[i] / d) * step;
      }
    }
    temp = Math.max(temp - cool, 0.5);
  }
  ids.forEach((id, i) => {
    out[id] = { x: x[i], y: y[i] };
  });
  return out;
}
