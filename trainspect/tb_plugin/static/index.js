// Entry point: TensorBoard loads this ES module in an iframe (data/plugin_entry.html) and calls render().

import {ProfilerView} from './static/profiler.js';
import {RulesView} from './static/rules.js';
import {BASE, clear, el, fetchJSON, loadECharts, notice, resizeCharts} from './static/util.js';

const REFRESH_MS = 5000;

export async function render() {
  document.head.append(el('link', {rel: 'stylesheet', href: new URL('static/style.css', BASE).href}));
  document.title = 'trainspect';
  const body = document.body;
  body.classList.add('trainspect');
  const banner = el('div', {class: 'messages'});
  const profilerRoot = el('div', {class: 'view', id: 'profiler-view'});
  const rulesRoot = el('div', {class: 'view', id: 'rules-view', hidden: true});
  const tabs = {};
  const live = el('input', {type: 'checkbox', checked: true, 'aria-label': 'auto-refresh'});
  const stamp = el('span', {class: 'muted'});
  const header = el('header', {class: 'top'}, el('strong', {class: 'brand', text: 'trainspect'}),
    tabs.profiler = el('button', {type: 'button', class: 'tab active', onclick: () => show('profiler')}, 'Profiler'),
    tabs.rules = el('button', {type: 'button', class: 'tab', onclick: () => show('rules')}, 'Rules'),
    el('span', {class: 'spacer'}),
    el('label', {}, live, ' auto-refresh'),
    el('button', {type: 'button', onclick: () => refresh()}, 'Reload'), stamp);
  clear(body).append(header, banner, profilerRoot, rulesRoot);
  const firstRuns = fetchJSON('runs').catch(() => null); // in parallel with the 1 MB charting library
  try {
    await loadECharts();
  } catch (err) {
    banner.append(notice('error', err.message));
    return;
  }
  const profiler = new ProfilerView(profilerRoot);
  const rules = new RulesView(rulesRoot);
  let current = location.hash === '#rules' ? 'rules' : 'profiler';
  let busy = false;

  let prefetched = firstRuns;

  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const data = (prefetched && (await prefetched)) || (await fetchJSON('runs'));
      prefetched = null;
      clear(banner);
      if (!data.runs.some((r) => r.has_data)) {
        banner.append(notice('info', 'No trainspect run in this log directory yet.'));
      }
      profiler.setRuns(data.runs);
      await (current === 'rules' ? rules.refresh() : profiler.refresh());
      stamp.textContent = `updated ${new Date().toLocaleTimeString([], {hour12: false})}`;
    } catch (err) {
      clear(banner).append(notice('error', `Could not reach the trainspect plugin: ${err.message}`));
    } finally {
      busy = false;
    }
  }

  function show(name) {
    current = name;
    profilerRoot.hidden = name !== 'profiler';
    rulesRoot.hidden = name !== 'rules';
    tabs.profiler.classList.toggle('active', name === 'profiler');
    tabs.rules.classList.toggle('active', name === 'rules');
    // The entry page has <base href="plugin/trainspect/">: keep the page's own path, change only the hash.
    history.replaceState(null, '', `${location.pathname}${location.search}#${name}`);
    refresh().then(() => resizeCharts(body));
  }

  window.addEventListener('resize', () => resizeCharts(body));
  setInterval(() => {
    if (live.checked && document.visibilityState === 'visible') refresh();
  }, REFRESH_MS);
  show(current);
}
