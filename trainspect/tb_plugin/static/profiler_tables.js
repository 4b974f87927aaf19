// The Profiler view's tables: utilisation statistics, top operators with the Chrome trace download, Python
// hotspots and dataloader waits. Every name from a run goes through textContent (util.el / util.table).

import {BASE, clear, el, fmtDuration, fmtNumber, fmtUnit, table} from './util.js';

export function drawPython(box, data) {
  clear(box);
  const rows = data.python || [];
  if (!rows.length) {
    box.append(el('p', {class: 'muted', text: 'No Python profile: set framework_profile_params=' +
      'ts.profiler.FrameworkProfile() to run cProfile over a few steps.'}));
    return;
  }
  box.append(table([
    {label: 'worker', value: (r) => r.worker}, {label: 'function', value: (r) => r.function, class: 'name'},
    {label: 'file', value: (r) => `${String(r.filename).split('/').slice(-2).join('/')}:${r.line}`, class: 'name'},
    {label: 'calls', value: (r) => fmtUnit(r.calls, 'count'), class: 'num'},
    {label: 'own time', value: (r) => fmtDuration(r.total_time_s), class: 'num'},
    {label: 'cumulative', value: (r) => fmtDuration(r.cumulative_time_s), class: 'num'},
  ], rows));
}

export function drawUtilization(box, data, node) {
  clear(box);
  // Labels and units come from the metric catalogue (trainspect/profiler/metrics.py) through the JSON.
  const rows = (data.utilization || []).filter((r) => r.node === node);
  if (!rows.length) {
    box.append(el('p', {class: 'muted', text: 'No system metrics were recorded for this node.'}));
    return;
  }
  const v = (key) => (r) => fmtUnit(r[key], r.unit);
  box.append(table([
    {label: 'metric', value: (r) => r.label || r.metric},
    {label: 'min', value: v('min'), class: 'num'}, {label: 'p50', value: v('p50'), class: 'num'},
    {label: 'p95', value: v('p95'), class: 'num'}, {label: 'p99', value: v('p99'), class: 'num'},
    {label: 'max', value: v('max'), class: 'num'}, {label: 'samples', value: (r) => fmtUnit(r.samples, 'count'), class: 'num'},
  ], rows));
}

export function drawTraces(box, data, run) {
  clear(box);
  for (const t of data.traces || []) {
    const url = new URL('trace', BASE);
    url.searchParams.set('run', run);
    url.searchParams.set('id', String(t.id));
    const steps = t.start_step === null ? t.file : (t.end_step > t.start_step ? `steps ${t.start_step}–${t.end_step}` : `step ${t.start_step}`);
    box.append(el('p', {class: 'trace'}, el('a', {href: url.href, download: t.file, class: 'trace-link',
      text: `Download the Chrome trace (${t.worker}, ${steps}, ${fmtUnit(t.bytes, 'B')})`}),
    el('span', {class: 'muted', text: ' — open it in ui.perfetto.dev or chrome://tracing'})));
  }
}

export function drawOperators(box, loaderBox, data) {
  clear(box);
  if (!data.operators.length) {
    box.append(el('p', {class: 'muted', text: 'No detailed profile: set framework_profile_params=' +
      'ts.profiler.FrameworkProfile() to profile a step window with torch.profiler.'}));
  } else {
    box.append(table([
      {label: 'worker', value: (r) => r.worker}, {label: 'device', value: (r) => r.device},
      {label: 'operator', value: (r) => r.name}, {label: 'calls', value: (r) => r.calls, class: 'num'},
      {label: 'self time', value: (r) => fmtDuration(r.self_time_us / 1e6), class: 'num'},
      {label: 'total time', value: (r) => fmtDuration(r.total_time_us / 1e6), class: 'num'},
      {label: 'self %', value: (r) => fmtNumber(r.percent), class: 'num'},
    ], data.operators));
  }
  clear(loaderBox);
  if (!data.dataloader.length) {
    loaderBox.append(el('p', {class: 'muted', text: 'No dataloader waits recorded.'}));
    return;
  }
  loaderBox.append(table([
    {label: 'worker', value: (r) => r.worker}, {label: 'loader workers', value: (r) => fmtNumber(r.num_workers)},
    {label: 'waits', value: (r) => r.count, class: 'num'}, {label: 'mean', value: (r) => fmtDuration(r.mean_s), class: 'num'},
    {label: 'p95', value: (r) => fmtDuration(r.p95_s), class: 'num'},
    {label: '% of loop', value: (r) => fmtNumber(r.loop_percent), class: 'num'},
  ], data.dataloader));
}
