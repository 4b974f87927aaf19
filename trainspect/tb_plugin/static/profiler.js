// The Profiler view: run and node pickers, utilisation heatmap with zoom, system time series, step-duration
// histogram, phase breakdown, top operators and the recommendations of triggered profiler rules.

import {Heatmap} from './heatmap.js';
import {tableCards} from './cards.js';
import {drawOperators, drawTraces} from './profiler_tables.js';
import {chart, clear, el, fetchJSON, fmtDuration, fmtNumber, fmtTime, fmtUnit, notice, table} from './util.js';

const TIP = {trigger: 'axis', renderMode: 'richText', confine: true};
const MIN_SAMPLES = 5; // fewer system samples are listed in words, not drawn over empty axes

function card(title, ...body) {
  return el('section', {class: 'card'}, el('h3', {text: title}), ...body);
}

export class ProfilerView {
  constructor(root) {
    this.root = root;
    this.run = null;
    this.node = null;
    this.range = null;
    this.token = 0;
    this.overview = null;
    this.runInfo = {};
    this.histKey = null;
    this.runSelect = el('select', {'aria-label': 'run', onchange: () => this.pick(this.runSelect.value)});
    this.nodeSelect = el('select', {'aria-label': 'node', onchange: () => {
      this.node = this.nodeSelect.value;
      this.range = null;
      if (this.overview) this.refreshCards();
      this.loadCharts();
    }});
    this.rangeText = el('span', {class: 'muted'});
    this.heatmap = new Heatmap((start, end) => this.zoom(start, end));
    this.messages = el('div', {class: 'messages'});
    this.series = el('div', {class: 'series-grid'});
    this.histSelect = el('select', {'aria-label': 'worker and mode', onchange: () => this.drawHistogram()});
    this.histChart = el('div', {class: 'chart'});
    this.stepTable = el('div');
    this.phaseChart = el('div', {class: 'chart chart-short'});
    this.jobText = el('p', {class: 'muted'});
    this.operators = el('div', {class: 'scroll'});
    this.traces = el('div', {class: 'traces'});
    this.generic = el('div', {class: 'generic-cards'}); // the registry's table cards (cards.js)
    this.cards = null;
    this.recs = el('div', {class: 'recs'});
    const controls = el('div', {class: 'controls'},
      el('label', {}, 'Run ', this.runSelect), el('label', {}, 'Node ', this.nodeSelect),
      el('button', {type: 'button', onclick: () => this.zoomOut()}, 'Zoom out'),
      el('button', {type: 'button', onclick: () => this.zoom(null, null)}, 'Reset zoom'), this.rangeText);
    const main = el('div', {class: 'main'},
      card('CPU cores and GPUs — utilisation over time (drag to zoom)', this.heatNote = el('p', {class: 'muted', hidden: true}),
        this.heatmap.root),
      card('Memory, GPU memory, I/O and network', this.series),
      this.generic,
      card('Step durations', this.histLabel = el('label', {}, 'Worker / mode ', this.histSelect), this.histChart,
        this.stepTable),
      card('Where the time went', this.jobText, this.phaseChart),
      card('Top operators of the profiled window', this.traces, this.operators));
    const aside = el('aside', {class: 'side'}, card('Recommendations', this.recs));
    root.append(controls, this.messages, el('div', {class: 'layout'}, main, aside));
  }

  setRuns(runs) {
    this.runInfo = Object.fromEntries(runs.map((r) => [r.name, r]));
    // Every run with trainspect data is listed (a run without profiler data says so when picked).
    const names = runs.filter((r) => r.has_data).map((r) => r.name);
    // Open on the newest run that has profiler data (not the first name, which may hold a single sample).
    const profiled = runs.filter((r) => r.has_data && r.profiler_at !== null && r.profiler_at !== undefined);
    profiled.sort((a, b) => b.profiler_at - a.profiler_at);
    const preferred = (profiled[0] || runs.find((r) => r.profiler) || {name: names[0] || null}).name;
    const current = Array.from(this.runSelect.options).map((o) => o.value);
    if (current.join('\n') !== names.join('\n')) {
      clear(this.runSelect);
      for (const name of names) this.runSelect.append(new Option(name, name));
    }
    if (!names.includes(this.run)) this.run = preferred;
    if (this.run !== null) this.runSelect.value = this.run;
  }

  pick(run) {
    this.run = run;
    this.node = null;
    this.range = null;
    this.histKey = null;
    this.refresh();
  }

  async refresh() {
    const token = ++this.token;
    clear(this.messages);
    if (this.run === null) {
      this.messages.append(notice('info', 'No trainspect run with profiler data yet. Record one with ' +
        'ts.torch.Hook(out_dir, profiler_config=ts.ProfilerConfig()) or trainspect run --profile.'));
      return;
    }
    // The overview and the charts are requested together (the server picks the first node when none is set).
    const known = (this.runInfo[this.run] || {}).profiler;
    const charts = known ? this.fetchCharts().catch((err) => err) : Promise.resolve(new Error('no profiler data'));
    let data;
    try {
      data = await fetchJSON('profiler', {run: this.run});
    } catch (err) {
      if (token === this.token) this.messages.append(notice('error', `Could not load the profiler data: ${err.message}`));
      return;
    }
    if (token !== this.token) return;
    this.overview = data;
    this.showStatus(data);
    this.setNodes(data.nodes);
    this.drawRecommendations(data);
    this.drawSteps(data);
    this.drawPhases(data);
    drawTraces(this.traces, data, this.run);
    drawOperators(this.operators, data);
    await this.refreshCards();
    if (token !== this.token) return;
    const result = await charts;
    if (token !== this.token) return;
    if (result instanceof Error || result[0].node !== this.node) await this.loadCharts();
    else this.drawCharts(result[0], result[1]);
  }

  async refreshCards() {
    if (this.cards === null) {
      try {
        this.cards = await tableCards();
      } catch (err) {
        this.messages.append(notice('error', `Could not load the card list: ${err.message}`));
        this.cards = [];
      }
      this.generic.append(...this.cards.map((c) => c.root));
    }
    const params = {run: this.run, node: this.node === null ? undefined : this.node};
    await Promise.all(this.cards.map((c) => c.refresh(params)));
  }

  showStatus(data) {
    if (data.status === 'no_profiler_data') {
      this.messages.append(notice('info', 'This run has no profiler data (yet). Profiler data is recorded with ' +
        'profiler_config=ts.ProfilerConfig(); a job that just started shows up after its first flush.'));
    } else if (data.status === 'running') {
      this.messages.append(notice('info', 'The job is still running: the view follows it (auto-refresh).'));
    }
    for (const problem of data.problems) this.messages.append(notice('warn', `Skipped damaged data: ${problem}`));
  }

  setNodes(nodes) {
    const names = nodes.map((n) => n.name);
    clear(this.nodeSelect);
    for (const name of names) this.nodeSelect.append(new Option(name, name));
    if (!names.includes(this.node)) this.node = names[0] || null;
    if (this.node !== null) this.nodeSelect.value = this.node;
  }

  zoom(start, end) {
    this.range = start === null ? null : [start, end];
    this.loadCharts();
  }

  zoomOut() {
    const hm = this.heatmap.data;
    if (!hm || !this.range) return;
    const span = hm.end - hm.start;
    const start = Math.max(hm.full_start, hm.start - span / 2);
    const end = Math.min(hm.full_end, hm.end + span / 2);
    this.zoom(start <= hm.full_start && end >= hm.full_end ? null : start, end);
  }

  fetchCharts() {
    const params = {run: this.run};
    if (this.node !== null) params.node = this.node;
    if (this.range) Object.assign(params, {start: this.range[0], end: this.range[1]});
    const columns = Math.min(1000, Math.max(50, Math.floor(this.heatmap.plotWidth())));
    return Promise.all([
      fetchJSON('heatmap', {...params, columns}),
      fetchJSON('timeseries', {...params, points: Math.min(columns, 600)}),
    ]);
  }

  async loadCharts() {
    const token = this.token;
    if (this.node === null) {
      clear(this.series).append(el('p', {class: 'muted', text: 'No system metrics were recorded for this run.'}));
      this.heatmap.root.hidden = true;
      this.rangeText.textContent = '';
      return;
    }
    try {
      const [hm, ts] = await this.fetchCharts();
      if (token === this.token) this.drawCharts(hm, ts);
    } catch (err) {
      if (token === this.token) this.messages.append(notice('error', `Could not load the charts: ${err.message}`));
    }
  }

  drawCharts(hm, ts) {
    this.heatNote.hidden = true;
    if (hm.samples < MIN_SAMPLES && !this.range) {
      this.heatmap.root.hidden = true;
      this.heatNote.hidden = false;
      this.heatNote.textContent = `Too few samples to draw (${hm.samples}).`;
      this.rangeText.textContent = `${hm.samples} sample${hm.samples === 1 ? '' : 's'}`;
      clear(this.series).append(notice('info', `Only ${hm.samples} system sample(s) were recorded on ${hm.node} ` +
        `(${fmtTime(hm.full_start)}${hm.full_end > hm.full_start ? ` – ${fmtTime(hm.full_end)}` : ''}): too few ` +
        'to draw. The utilisation statistics below list them; a longer run, or a shorter ' +
        'system_monitor_interval_millis, gives charts.'));
      document.body.dataset.profilerReady = String(Date.now());
      return;
    }
    this.heatmap.root.hidden = false;
    this.heatmap.draw(hm);
    this.rangeText.textContent = `${fmtTime(hm.start)} – ${fmtTime(hm.end)} · ${hm.samples} samples · ` +
      `${hm.columns} bucket${hm.columns === 1 ? '' : 's'} of ${fmtDuration(hm.bucket_s)}`;
    this.drawSeries(ts);
    document.body.dataset.profilerReady = String(Date.now());
  }

  drawSeries(ts) {
    clear(this.series);
    if (!ts.groups.length) this.series.append(el('p', {class: 'muted', text: 'No memory, I/O or network metrics.'}));
    const times = ts.times.map((t) => t * 1000);
    for (const group of ts.groups) {
      const box = el('div', {class: 'chart chart-short'});
      this.series.append(el('div', {class: 'series-card'}, el('h4', {text: group.unit ? `${group.title} (${group.unit})` : group.title}), box));
      const fmt = (v) => fmtUnit(v, group.unit);
      // The axis spans the samples (fitted), not the requested range: a 1-second run is not drawn over two days.
      const first = times.length ? times[0] : ts.start * 1000;
      const last = times.length ? times[times.length - 1] : ts.end * 1000;
      chart(box, {
        animation: false,
        grid: {left: 70, right: 16, top: 28, bottom: 24},
        legend: {top: 0, type: 'scroll', textStyle: {fontSize: 10}},
        tooltip: {...TIP, valueFormatter: fmt},
        xAxis: {type: 'time', min: first, max: Math.max(last, first + 1000), splitNumber: 4, axisLabel: {hideOverlap: true}},
        yAxis: {type: 'value', axisLabel: {formatter: fmt, hideOverlap: true}, max: group.unit === '%' ? 100 : null},
        series: group.series.map((s) => ({
          name: s.label || s.key, // from the metric catalogue (trainspect/profiler/metrics.py)
          type: 'line', showSymbol: times.length < 30, sampling: 'lttb',
          data: s.values.map((v, i) => [times[i], v]),
        })),
      });
    }
  }

  drawRecommendations(data) {
    clear(this.recs);
    // The same count of rules as the Rules tab, the report and `trainspect rules` (RuleCounts.line), and the
    // steps of each mode apart ("300 TRAIN, 3 EVAL steps").
    if (data.rule_counts) this.recs.append(el('p', {class: 'count-line', text: data.rule_counts.line}));
    if (data.steps_text) this.recs.append(el('p', {class: 'steps-line muted', text: data.steps_text}));
    if (!data.profiler_rules) {
      this.recs.append(el('p', {class: 'muted', text: 'No profiler rule has been evaluated for this run. ' +
        'Run: trainspect rules RUN_DIR'}));
      return;
    }
    if (!data.recommendations.length) {
      this.recs.append(el('p', {class: 'muted', text: `${data.profiler_rules} profiler rules found no issue.`}));
    }
    for (const r of data.recommendations) {
      this.recs.append(el('div', {class: 'rec'}, el('strong', {text: r.rule}),
        el('span', {class: 'muted', text: ` · ${r.triggers} trigger(s)`}),
        el('p', {text: r.message}), r.recommendation ? el('p', {class: 'rec-do', text: r.recommendation}) : null));
    }
  }

  drawSteps(data) {
    const keys = data.histogram.map((h) => `${h.worker} / ${h.mode}`);
    clear(this.histSelect);
    this.histLabel.hidden = !keys.length;
    keys.forEach((key, i) => this.histSelect.append(new Option(key, String(i))));
    const keep = keys.indexOf(this.histKey);
    // Open on the group with the most steps (TRAIN, usually), not the first name in alphabetical order (EVAL).
    const counts = data.histogram.map((h) => h.bins.reduce((n, b) => n + b[2], 0));
    const most = counts.indexOf(Math.max(...counts, 0));
    this.histSelect.value = String(keep >= 0 ? keep : Math.max(most, 0));
    this.drawHistogram();
    clear(this.stepTable);
    if (!data.steps.length) {
      this.stepTable.append(el('p', {class: 'muted', text: 'No steps recorded.'}));
      return;
    }
    this.stepTable.append(table([
      {label: 'worker', value: (r) => r.worker}, {label: 'mode', value: (r) => r.mode},
      {label: 'steps', value: (r) => r.count, class: 'num'},
      {label: 'mean', value: (r) => fmtDuration(r.mean), class: 'num'},
      {label: 'p50', value: (r) => fmtDuration(r.p50), class: 'num'},
      {label: 'p95', value: (r) => fmtDuration(r.p95), class: 'num'},
      {label: 'max', value: (r) => fmtDuration(r.max), class: 'num'},
      {label: 'between steps', value: (r) => fmtDuration(r.between_mean), class: 'num'},
    ], data.steps));
  }

  drawHistogram() {
    const data = this.overview;
    const group = data && data.histogram[Number(this.histSelect.value)];
    if (!group) {
      this.histChart.hidden = true;
      return;
    }
    this.histKey = `${group.worker} / ${group.mode}`;
    this.histChart.hidden = false;
    chart(this.histChart, {
      animation: false,
      grid: {left: 50, right: 12, top: 12, bottom: 36},
      tooltip: TIP,
      xAxis: {type: 'category', name: 'step duration', nameLocation: 'middle', nameGap: 24,
        data: group.bins.map((b) => fmtDuration((b[0] + b[1]) / 2))},
      yAxis: {type: 'value', name: 'steps', minInterval: 1},
      series: [{name: 'steps', type: 'bar', data: group.bins.map((b) => b[2]), itemStyle: {color: '#3b6ea8'}}],
    });
  }

  drawPhases(data) {
    const job = data.job || {};
    this.jobText.textContent = job.duration_s === undefined ? 'No timing data yet.' :
      `Job ${fmtDuration(job.duration_s)} · initialization ${fmtDuration(job.initialization_s)} · training loop ` +
      `${fmtDuration(job.training_loop_s)} · finalization ${fmtDuration(job.finalization_s)}`;
    const rows = [['modes', data.phases.modes || {}], ['spans', data.phases.spans || {}]];
    const names = [...new Set(rows.flatMap(([, v]) => Object.keys(v)))];
    if (!names.length) {
      this.phaseChart.hidden = true;
      return;
    }
    this.phaseChart.hidden = false;
    chart(this.phaseChart, {
      animation: false,
      grid: {left: 90, right: 16, top: 28, bottom: 24},
      legend: {top: 0, textStyle: {fontSize: 10}},
      tooltip: {...TIP, valueFormatter: (v) => `${fmtNumber(v)} %`},
      xAxis: {type: 'value', max: 100, axisLabel: {formatter: '{value} %'}},
      yAxis: {type: 'category', data: ['step modes', 'inside steps']},
      series: names.map((name) => ({name, type: 'bar', stack: 'all',
        data: rows.map(([, v]) => (v[name] === undefined ? 0 : Number(v[name].toFixed(2))))})),
    });
  }
}
