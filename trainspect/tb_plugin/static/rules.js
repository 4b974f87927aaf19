// The Rules view: every run's verdicts in one full-height table (status, first/last trigger step, message,
// recommendation); a click opens the rule's detail: parameters, the tensors it read with links into TensorBoard's
// own dashboards, and the watched value (Verdict.series) with thresholds, trigger markers and NaN/Inf steps.

import {chart, clear, el, fetchJSON, fmtDateTime, fmtNumber, notice, statusChip, wantsLog} from './util.js';

const ORDER = {IssuesFound: 0, Error: 1, InProgress: 2, NoData: 3, NoIssuesFound: 4};

// TensorBoard's dashboards, reached from the plugin's iframe (<logdir root>/data/plugin_entry.html).
function tensorBoardRoot() {
  return new URL('../', document.URL);
}

function regexEscape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// The run is selected through each dashboard's own URL state (TensorBoard 2.x): the Polymer dashboards (Scalars,
// Histograms) read `regexInput` from the hash (their runs selector's filter); Time Series reads the query
// parameter `runFilter` (its runs table's regex filter) beside `tagFilter`.
export function tensorLinks(tag, run) {
  const root = tensorBoardRoot();
  const tagRe = `^${regexEscape(tag)}$`;
  const runRe = run ? `^${regexEscape(run)}$` : '';
  const hash = `tagFilter=${encodeURIComponent(tagRe)}` + (run ? `&regexInput=${encodeURIComponent(runRe)}` : '');
  const timeseries = new URL(root);
  timeseries.searchParams.set('tagFilter', tagRe);
  if (run) timeseries.searchParams.set('runFilter', runRe);
  return [
    ['Scalars', `${root.href}#scalars&${hash}`],
    ['Histograms', `${root.href}#histograms&${hash}`],
    ['Time Series', `${timeseries.href}#timeseries`],
  ];
}

// The run the tab opens on: the first (by name) whose rules found issues, else every run ('').
export function defaultRun(summaries) {
  const hit = (summaries || []).find((s) => s.counts && s.counts.issues > 0);
  return hit ? hit.run : '';
}

export function paramText(value) {
  // JSON's spelling: false, null, [..] (a Python False used to show as an empty cell)
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'number') return fmtNumber(value, 6);
  if (typeof value === 'object' || typeof value === 'boolean') return JSON.stringify(value);
  return String(value);
}

export class RulesView {
  constructor(root) {
    this.root = root;
    this.selected = null;
    this.token = 0;
    this.log = null; // null: automatic
    this.messages = el('div', {class: 'messages'});
    this.filter = el('input', {type: 'search', placeholder: 'filter runs and rules', 'aria-label': 'filter',
      oninput: () => this.drawTable()});
    this.onlyIssues = el('input', {type: 'checkbox', 'aria-label': 'only rules with issues', onchange: () => this.drawTable()});
    this.runSelect = el('select', {'aria-label': 'rules of run', class: 'rules-run', onchange: () => {
      this.run = this.runSelect.value;
      this.drawSummary();
      this.drawTable();
    }});
    this.run = null; // null: not chosen yet (the first load picks the run with issues)
    this.summaries = [];
    this.summary = el('div', {class: 'rules-summary'});
    this.tableBox = el('div', {class: 'rules-scroll'});
    this.detail = el('div', {class: 'detail'});
    this.rows = [];
    root.append(el('div', {class: 'controls'}, el('label', {}, 'Run ', this.runSelect), this.filter,
      el('label', {}, this.onlyIssues, ' only rules with issues')),
      this.messages, this.summary,
      el('div', {class: 'rules-layout'},
        el('section', {class: 'card rules-card'}, el('h3', {text: 'Rule verdicts of every run'}), this.tableBox),
        this.detail));
  }

  async refresh() {
    const token = ++this.token;
    let data;
    try {
      data = await fetchJSON('rules');
    } catch (err) {
      if (token === this.token) clear(this.messages).append(notice('error', `Could not load the verdicts: ${err.message}`));
      return;
    }
    if (token !== this.token) return;
    clear(this.messages);
    for (const p of data.problems) this.messages.append(notice('warn', `${p.run}: ${p.error}`));
    if (!data.rows.length && !data.problems.length) {
      this.messages.append(notice('info', 'No rule verdicts yet. Give the hook rules (rules="default") or run ' +
        '"trainspect rules RUN_DIR" to evaluate a finished run.'));
    }
    this.rows = data.rows.slice().sort((a, b) => (ORDER[a.status] ?? 9) - (ORDER[b.status] ?? 9) ||
      (a.first_trigger_step ?? Infinity) - (b.first_trigger_step ?? Infinity) ||
      a.run.localeCompare(b.run) || a.rule.localeCompare(b.rule));
    this.summaries = data.summaries || [];
    this.setRuns();
    this.drawSummary();
    this.drawTable();
    if (!this.selected) {
      const first = this.rows.find((r) => r.status === 'IssuesFound' && (!this.run || r.run === this.run));
      if (first) this.selected = {run: first.run, rule: first.rule};
    }
    if (this.selected) await this.open(this.selected.run, this.selected.rule, false);
    document.body.dataset.rulesReady = String(Date.now());
  }

  setRuns() {
    const names = this.summaries.map((s) => s.run);
    if (this.run === null || (this.run && !names.includes(this.run))) this.run = defaultRun(this.summaries);
    const have = Array.from(this.runSelect.options).map((o) => o.value).join('\n');
    if (have !== ['', ...names].join('\n')) {
      clear(this.runSelect).append(new Option('every run', ''));
      for (const name of names) this.runSelect.append(new Option(name, name));
    }
    this.runSelect.value = this.run;
  }

  drawSummary() {
    // The count sentence of `trainspect rules` and the report (RuleCounts.line), and how a StopTraining ended it.
    clear(this.summary);
    for (const s of this.summaries.filter((x) => !this.run || x.run === this.run)) {
      const box = el('div', {class: 'run-summary', 'data-run': s.run},
        el('p', {class: 'count-line'}, el('strong', {text: `${s.run}: `}), el('span', {text: s.counts.line})));
      for (const stop of s.stops || []) {
        box.append(el('p', {class: 'stop-line', text: `Training ${stop.text}` + (stop.worker ? ` on ${stop.worker}` : '') + '.'}));
      }
      this.summary.append(box);
    }
  }

  drawTable() {
    const needle = this.filter.value.trim().toLowerCase();
    const rows = this.rows.filter((r) => (!needle || `${r.run} ${r.rule}`.toLowerCase().includes(needle)) &&
      (!this.onlyIssues.checked || r.status === 'IssuesFound') && (!this.run || r.run === this.run));
    const head = [['run'], ['rule'], ['status'], ['triggers', 'num'], ['first step', 'num'], ['last step', 'num'],
      ['message'], ['recommendation']];
    const body = rows.map((r) => {
      const isSel = this.selected && this.selected.run === r.run && this.selected.rule === r.rule;
      const issue = r.status === 'IssuesFound';
      return el('tr', {class: `clickable${isSel ? ' selected' : ''}`, tabindex: 0, 'data-rule': r.rule,
        onclick: () => this.open(r.run, r.rule, true),
        onkeydown: (e) => { if (e.key === 'Enter') this.open(r.run, r.rule, true); }},
      el('td', {class: 'name', text: r.run}), el('td', {class: 'name', text: r.rule}), el('td', {}, statusChip(r.status)),
      el('td', {class: 'num', text: r.triggers}), el('td', {class: 'num', text: r.first_trigger_step ?? '–'}),
      el('td', {class: 'num', text: r.last_trigger_step ?? '–'}), el('td', {class: 'message', text: r.message}),
      el('td', {class: 'message rec-do', text: issue ? r.recommendation || '' : ''}));
    });
    clear(this.tableBox).append(el('table', {class: 'grid rules-table'},
      el('thead', {}, el('tr', {}, head.map(([h, c]) => el('th', {text: h, class: c})))), el('tbody', {}, body)));
  }

  async open(run, rule, scroll) {
    this.selected = {run, rule};
    this.drawTable();
    let d;
    try {
      d = await fetchJSON('rule', {run, rule});
    } catch (err) {
      clear(this.detail).append(notice('error', `Could not load ${rule}: ${err.message}`));
      return;
    }
    const params = Object.entries(d.parameters || {});
    const box = el('div', {class: 'chart'});
    clear(this.detail).append(el('section', {class: 'card rule-detail'},
      el('h3', {}, el('span', {text: `${d.rule} `}), statusChip(d.status), el('span', {class: 'muted', text: ` · ${d.run}`})),
      el('p', {class: 'message', text: d.message || '(no message)'}),
      d.recommendation ? el('p', {class: 'rec-do', text: `Recommendation: ${d.recommendation}`}) : null,
      el('p', {class: 'muted', text: `${d.triggers} trigger(s) in ${d.datapoints} datapoint(s); first trigger ` +
        (d.first_trigger_step === null && d.first_trigger_time ?
          `${fmtDateTime(d.first_trigger_time)}, last ${fmtDateTime(d.last_trigger_time)}` :
          `step ${d.first_trigger_step ?? '–'}, last ${d.last_trigger_step ?? '–'}`) +
        (d.evaluated_at ? ` · evaluated ${d.source || ''} ${fmtDateTime(d.evaluated_at)}` : '')}),
      this.tensorList(d),
      params.length ? el('table', {class: 'grid params'}, el('tbody', {}, params.map(([k, v]) =>
        el('tr', {}, el('th', {text: k}), el('td', {text: paramText(v)}))))) :
        el('p', {class: 'muted', text: 'No parameters.'}),
      d.series.length ? box : el('p', {class: 'muted', text: 'This rule recorded no series to chart.'})));
    if (d.series.length) this.drawSeries(box, d.series);
    if (scroll) this.detail.scrollIntoView({block: 'nearest'});
  }

  tensorList(d) {
    const tags = d.tensor_tags || [];
    if (!tags.length) return el('p', {class: 'muted', text: d.kind === 'profiler' ? 'Reads system and framework metrics.' : 'No tensor listed.'});
    const more = d.tensors.length - tags.length;
    return el('div', {class: 'tensors'}, el('h4', {text: `Tensors read (${d.tensors.length})`}),
      el('ul', {class: 'tensor-list'}, tags.map((t) => el('li', {'data-tensor': t.tensor},
        el('code', {text: t.tensor}), ' ',
        tensorLinks(t.tag, d.run).map(([label, href]) => el('a', {class: 'tb-link', href, target: '_top', text: label}))))),
      more > 0 ? el('p', {class: 'muted', text: `and ${more} more`}) : null);
  }

  drawSeries(box, series) {
    const isTime = series[0].x_unit !== 'step'; // profiler rules watch values over epoch seconds ("s")
    const xOf = (x) => (isTime ? x * 1000 : x);
    const all = series.flatMap((s) => s.y.concat(s.threshold === null || s.threshold === undefined ? [] : [s.threshold]));
    const log = this.log === null ? wantsLog(all) : this.log;
    const finite = all.filter((v) => typeof v === 'number' && isFinite(v));
    const top = finite.length ? Math.max(...finite) : (log ? 1 : 0);
    const option = {
      animation: false,
      grid: {left: 80, right: 30, top: 40, bottom: 44},
      legend: {top: 0, type: 'scroll', textStyle: {fontSize: 11}},
      tooltip: {trigger: 'item', renderMode: 'richText', confine: true},
      xAxis: {type: isTime ? 'time' : 'value', name: isTime ? 'time' : 'step', nameLocation: 'middle', nameGap: 26,
        min: 'dataMin', max: 'dataMax', minInterval: isTime ? undefined : 1, axisLabel: {hideOverlap: true}},
      yAxis: {type: log ? 'log' : 'value', scale: true, name: series.length === 1 ? series[0].label : 'value',
        nameTextStyle: {align: 'left'}, axisLabel: {formatter: (v) => fmtNumber(v)}},
      series: [],
    };
    series.forEach((s) => {
      const line = {name: s.label, type: 'line', showSymbol: s.x.length < 60,
        data: s.x.map((x, j) => [xOf(x), s.y[j]])};
      if (s.threshold !== null && s.threshold !== undefined && (!log || s.threshold > 0)) {
        line.markLine = {symbol: 'none', silent: true, lineStyle: {type: 'dashed', color: '#c62828'},
          label: {position: 'insideEndTop', formatter: `threshold ${fmtNumber(s.threshold)}`}, data: [{yAxis: s.threshold}]};
      }
      option.series.push(line);
      option.series.push({name: `triggers: ${s.label}`, type: 'scatter', symbol: 'diamond', symbolSize: 10, z: 5,
        itemStyle: {color: '#c62828'},
        data: s.trigger_x.map((x, j) => [xOf(x), s.trigger_y[j]]).filter((p) => p[1] !== null)});
      const bad = s.x.filter((x, j) => s.y[j] === null);
      if (bad.length) {
        option.series.push({name: `NaN/Inf: ${s.label}`, type: 'scatter', symbol: 'triangle', symbolSize: 9, z: 6,
          itemStyle: {color: '#7b1fa2'}, data: bad.map((x) => [xOf(x), top])});
      }
    });
    box.setAttribute('aria-label', series.map((s) => s.label).join(', '));
    const toggle = el('label', {class: 'muted'}, el('input', {type: 'checkbox', checked: log, 'aria-label': 'log scale',
      onchange: (e) => { this.log = e.target.checked; this.drawSeries(box, series); }}), ' log scale');
    const note = el('p', {class: 'muted series-note', text: `Watched: ${series.map((s) => s.label).join('; ')}` +
      (series.some((s) => s.points > s.x.length) ? ' (downsampled for display; triggers kept)' : '') +
      (series.some((s) => s.x.length < 3) ? ` · only ${Math.max(...series.map((s) => s.x.length))} value(s) recorded` : '')});
    const old = box.parentNode && box.parentNode.querySelector('.series-head');
    if (old) old.remove();
    box.before(el('div', {class: 'series-head'}, note, toggle));
    chart(box, option);
  }
}
