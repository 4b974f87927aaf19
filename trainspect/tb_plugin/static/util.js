// Small DOM and data helpers. Every text that comes from a run (names, messages) goes through
// textContent or `new Option`, never parsed as HTML, so a run called "<img onerror=...>" stays text.

export const BASE = new URL('../', import.meta.url);

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = String(value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function fetchJSON(route, params = {}) {
  const url = new URL(route, BASE);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') url.searchParams.set(key, String(value));
  }
  const response = await fetch(url, {headers: {Accept: 'application/json'}});
  let body = null;
  try {
    body = await response.json();
  } catch (err) {
    throw new HttpError(response.status, `${route}: response is not JSON (${response.status})`);
  }
  if (!response.ok) throw new HttpError(response.status, (body && body.error) || `${route}: HTTP ${response.status}`);
  return body;
}

let echartsPromise = null;

export function loadECharts() {
  // The vendored ECharts build is a UMD script (window.echarts), served by the plugin; never a CDN.
  if (window.echarts) return Promise.resolve(window.echarts);
  if (!echartsPromise) {
    echartsPromise = new Promise((resolve, reject) => {
      const script = document.createElement('script');
      script.src = new URL('vendor/echarts.min.js', BASE).href;
      script.onload = () => resolve(window.echarts);
      script.onerror = () => reject(new Error('could not load the charting library'));
      document.head.append(script);
    });
  }
  return echartsPromise;
}

export function chart(container, option) {
  let instance = window.echarts.getInstanceByDom(container);
  if (!instance) instance = window.echarts.init(container, null, {renderer: 'canvas'});
  instance.setOption(option, true);
  return instance;
}

export function resizeCharts(root) {
  for (const node of root.querySelectorAll('.chart')) {
    const instance = window.echarts && window.echarts.getInstanceByDom(node);
    if (instance) instance.resize();
  }
}

export function fmtTime(epochSeconds) {
  if (epochSeconds === null || epochSeconds === undefined) return '–';
  const d = new Date(epochSeconds * 1000);
  return d.toLocaleTimeString([], {hour12: false});
}

export function fmtDateTime(epochSeconds) {
  if (epochSeconds === null || epochSeconds === undefined) return '–';
  const d = new Date(epochSeconds * 1000);
  return `${d.toLocaleDateString()} ${d.toLocaleTimeString([], {hour12: false})}`;
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return '–';
  if (seconds < 1e-3) return `${(seconds * 1e6).toFixed(0)} µs`;
  if (seconds < 1) return `${(seconds * 1e3).toFixed(1)} ms`;
  if (seconds < 120) return `${seconds.toFixed(2)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(2)} h`;
}

export function fmtNumber(value, digits = 3) {
  if (value === null || value === undefined) return '–';
  if (typeof value !== 'number') return String(value);
  if (value !== 0 && (Math.abs(value) >= 1e5 || Math.abs(value) < 1e-3)) return value.toExponential(2);
  return String(Number(value.toPrecision(digits)));
}

export function fmtBytes(value) {
  if (value === null || value === undefined) return '–';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = value;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toFixed(v >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

export function table(columns, rows) {
  // columns: [{label, value: row => text, class?}]
  return el('table', {class: 'grid'},
    el('thead', {}, el('tr', {}, columns.map((c) => el('th', {text: c.label, class: c.class})))),
    el('tbody', {}, rows.map((row) => el('tr', {}, columns.map((c) => el('td', {text: c.value(row), class: c.class}))))));
}

export function statusChip(status) {
  return el('span', {class: `chip chip-${String(status).toLowerCase()}`, text: status});
}

export function notice(kind, text) {
  return el('div', {class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : 'status', text});
}
