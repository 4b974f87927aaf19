// The Profiler view's own tables: top operators with the Chrome trace download (the utilisation statistics,
// Python hotspots and dataloader waits are generic cards: cards.js). Every name from a run goes through
// textContent (util.el / util.table).

import {BASE, clear, el, fmtDuration, fmtNumber, fmtUnit, table} from './util.js';

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

export function drawOperators(box, data) {
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
}
