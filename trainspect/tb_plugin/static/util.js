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
  if (seconds === 0) return '0 s';
  if (Math.abs(seconds) < 1e-3) return `${Number((seconds * 1e6).toPrecision(3))} µs`;
  if (Math.abs(seconds) < 1) return `${Number((seconds * 1e3).toPrecision(3))} ms`;
  if (seconds < 120) return `${Number(seconds.toPrecision(3))} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(2)} h`;
}

export function fmtNumber(value, digits = 3) {
  // Three significant digits, thousands separated; exponent form only below 1e-3 or from 1e9.
  if (value === null || value === undefined) return '–';
  if (typeof value !== 'number') return String(value);
  if (!isFinite(value)) return Number.isNaN(value) ? 'NaN' : (value > 0 ? 'Inf' : '-Inf');
  const a = Math.abs(value);
  if (a !== 0 && (a >= 1e9 || a < 1e-3)) return value.toExponential(digits - 1).replace(/\.?0+e/, 'e').replace('e+', 'e');
  if (a >= 10 ** (digits - 1)) return Math.round(value).toLocaleString('en-US');
  return Number(value.toPrecision(digits)).toLocaleString('en-US', {maximumFractionDigits: 6});
}

function scaled(value, units, base = 1000) {
  let v = value;
  let i = 0;
  while (Math.abs(v) >= base && i < units.length - 1) {
    v /= base;
    i += 1;
  }
  return `${fmtNumber(v)} ${units[i]}`;
}

// A value with its unit, for axis ticks, tooltips and tables. The units are those of the metric catalogue
// (trainspect/profiler/metrics.py), sent in the plugin's JSON: 'percent' or '%', 'bytes' or 'B', 'bytes/s' or 'B/s',
// 's', 'count' (a plain number: 12 threads read "12"), 'W', '°C'; any other unit is written after the number.
export function fmtUnit(value, unit) {
  if (value === null || value === undefined || typeof value !== 'number' || !isFinite(value)) return fmtNumber(value);
  switch (unit) {
    case '%': case 'percent': return `${fmtNumber(value)} %`;
    case 'B': case 'bytes': return scaled(value, ['B', 'KB', 'MB', 'GB', 'TB']);
    case 'B/s': case 'bytes/s': return scaled(value, ['B/s', 'KB/s', 'MB/s', 'GB/s']);
    case 's': return fmtDuration(value);
    case 'count': case 'step': return Number.isInteger(value) ? value.toLocaleString('en-US') : fmtNumber(value);
    default: return unit ? `${fmtNumber(value)} ${unit}` : fmtNumber(value);
  }
}

// Whether a log axis reads better: every finite value positive, spanning more than three orders of magnitude.
export function wantsLog(values) {
  const finite = values.filter((v) => typeof v === 'number' && isFinite(v));
  if (!finite.length || Math.min(...finite) <= 0) return false;
  return Math.max(...finite) / Math.min(...finite) > 1e3;
}

// The clock time of a tick with as many decimals as the tick spacing needs, so that zoomed ticks never repeat.
export function fmtClock(epochSeconds, spacing) {
  if (epochSeconds === null || epochSeconds === undefined) return '–';
  const d = new Date(epochSeconds * 1000);
  const hms = d.toLocaleTimeString([], {hour12: false});
  if (!(spacing < 1)) return hms;
  const digits = Math.min(3, Math.ceil(-Math.log10(spacing) - 1e-9));
  const frac = Math.floor((epochSeconds % 1) * 10 ** digits + 1e-6); // truncated: the clock never rolls over
  return `${hms}.${String(frac).padStart(digits, '0')}`;
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
