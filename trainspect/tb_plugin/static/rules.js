// The Rules view: every run's verdicts in one table; a click opens the rule's detail with the watched
// value (Verdict.series) charted and the triggering points marked.

import {chart, clear, el, fetchJSON, fmtDateTime, fmtNumber, notice, statusChip} from './util.js';

const ORDER = {IssuesFound: 0, Error: 1, InProgress: 2, NoData: 3, NoIssuesFound: 4};

export class RulesView {
  constructor(root) {
    this.root = root;
    this.selected = null;
    this.token = 0;
    this.messages = el('div', {class: 'messages'});
    this.filter = el('input', {type: 'search', placeholder: 'filter runs and rules', 'aria-label': 'filter',
      oninput: () => this.drawTable()});
    this.tableBox = el('div', {class: 'scroll'});
    this.detail = el('div', {class: 'detail'});
    this.rows = [];
    root.append(el('div', {class: 'controls'}, this.filter), this.messages,
      el('section', {class: 'card'}, el('h3', {text: 'Rule verdicts of every run'}), this.tableBox),
      this.detail);
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
      a.run.localeCompare(b.run) || a.rule.localeCompare(b.rule));
    this.drawTable();
    if (this.selected) await this.open(this.selected.run, this.selected.rule, false);
    document.body.dataset.rulesReady = String(Date.now());
  }

  drawTable() {
    const needle = this.filter.value.trim().toLowerCase();
    const rows = this.rows.filter((r) => !needle || `${r.run} ${r.rule}`.toLowerCase().includes(needle));
    const head = ['run', 'rule', 'kind', 'status', 'triggers', 'datapoints', 'last trigger step', 'last trigger time',
      'message'];
    const body = rows.map((r) => {
      const isSel = this.selected && this.selected.run === r.run && this.selected.rule === r.rule;
      return el('tr', {class: `clickable${isSel ? ' selected' : ''}`, tabindex: 0, 'data-rule': r.rule,
        onclick: () => this.open(r.run, r.rule, true),
        onkeydown: (e) => { if (e.key === 'Enter') this.open(r.run, r.rule, true); }},
      el('td', {text: r.run}), el('td', {text: r.rule}), el('td', {text: r.kind}), el('td', {}, statusChip(r.status)),
      el('td', {class: 'num', text: r.triggers}), el('td', {class: 'num', text: r.datapoints}),
      el('td', {class: 'num', text: r.last_trigger_step ?? '–'}), el('td', {text: fmtDateTime(r.last_trigger_time)}),
      el('td', {class: 'message', text: r.message}));
    });
    clear(this.tableBox).append(el('table', {class: 'grid rules-table'},
      el('thead', {}, el('tr', {}, head.map((h) => el('th', {text: h})))), el('tbody', {}, body)));
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
        `step ${d.first_trigger_step ?? '–'}, last ${d.last_trigger_step ?? '–'}`}),
      params.length ? el('table', {class: 'grid params'}, el('tbody', {}, params.map(([k, v]) =>
        el('tr', {}, el('th', {text: k}), el('td', {text: typeof v === 'object' ? JSON.stringify(v) : v}))))) :
        el('p', {class: 'muted', text: 'No parameters.'}),
      d.series.length ? box : el('p', {class: 'muted', text: 'This rule recorded no series to chart.'})));
    if (d.series.length) this.drawSeries(box, d.series);
    if (scroll) this.detail.scrollIntoView({block: 'nearest'});
  }

  drawSeries(box, series) {
    const isTime = series[0].x_unit !== 'step'; // profiler rules watch values over epoch seconds ("s")
    const xOf = (x) => (isTime ? x * 1000 : x);
    const option = {
      animation: false,
      grid: {left: 70, right: 20, top: 30, bottom: 30},
      legend: {top: 0, textStyle: {fontSize: 10}},
      tooltip: {trigger: 'item', renderMode: 'richText', confine: true},
      xAxis: {type: isTime ? 'time' : 'value', name: isTime ? '' : 'step', scale: true},
      yAxis: {type: 'value', scale: true, axisLabel: {formatter: (v) => fmtNumber(v)}},
      series: [],
    };
    series.forEach((s, i) => {
      const line = {name: `watched value ${i + 1}`, type: 'line', showSymbol: s.x.length < 60,
        data: s.x.map((x, j) => [xOf(x), s.y[j]])};
      if (s.threshold !== null && s.threshold !== undefined) {
        line.markLine = {symbol: 'none', silent: true, lineStyle: {type: 'dashed', color: '#c62828'},
          label: {position: 'insideEndTop', formatter: `threshold ${fmtNumber(s.threshold)}`}, data: [{yAxis: s.threshold}]};
      }
      option.series.push(line);
      option.series.push({name: `triggers ${i + 1}`, type: 'scatter', symbolSize: 11, z: 5, itemStyle: {color: '#c62828'},
        data: s.trigger_x.map((x, j) => [xOf(x), s.trigger_y[j]]).filter((p) => p[1] !== null)});
    });
    option.legend.data = option.series.map((s) => s.name);
    box.setAttribute('aria-label', series.map((s) => s.label).join(', '));
    box.before(el('p', {class: 'muted', text: `Watched: ${series.map((s) => s.label).join('; ')}` +
      (series.some((s) => s.points > s.x.length) ? ' (downsampled for display; triggers kept)' : '')}));
    chart(box, option);
  }
}
