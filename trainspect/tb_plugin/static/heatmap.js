// Utilisation heatmap drawn on one canvas: rows are CPU cores and GPUs, columns time buckets computed by
// the server (GET heatmap), step boundaries as thin vertical lines. Drag to zoom into a time range.

import {el, fmtClock, fmtTime} from './util.js';

const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]]; // viridis
const MISSING = [225, 225, 225];
const LEFT = 48;
const RIGHT = 12;
const TOP = 8;
const BOTTOM = 26;

export function colour(value) {
  if (value === null || value === undefined) return MISSING;
  const x = Math.max(0, Math.min(100, value)) / 100 * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(x));
  const f = x - i;
  return STOPS[i].map((c, k) => Math.round(c + f * (STOPS[i + 1][k] - c)));
}

export class Heatmap {
  constructor(onZoom) {
    this.onZoom = onZoom;
    this.data = null;
    this.canvas = el('canvas', {class: 'heatmap-canvas', 'aria-label': 'utilisation heatmap'});
    this.tip = el('div', {class: 'heatmap-tip', hidden: true});
    this.legend = this.buildLegend();
    this.root = el('div', {class: 'heatmap'}, this.canvas, this.tip, this.legend);
    this.drag = null;
    this.canvas.addEventListener('mousedown', (e) => this.startDrag(e));
    this.canvas.addEventListener('mousemove', (e) => this.move(e));
    this.canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    window.addEventListener('mouseup', (e) => this.endDrag(e));
  }

  buildLegend() {
    const bar = el('canvas', {class: 'legend-bar', width: 200, height: 10});
    const ctx = bar.getContext('2d');
    for (let x = 0; x < 200; x++) {
      const [r, g, b] = colour(x / 2);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(x, 0, 1, 10);
    }
    return el('div', {class: 'legend'}, el('span', {text: '0 %'}), bar, el('span', {text: '100 % utilisation'}),
      el('span', {class: 'legend-missing', text: 'no sample'}), el('span', {class: 'legend-step', text: 'step start'}));
  }

  plotWidth() {
    const width = Math.max(300, this.root.clientWidth || 800);
    return width - LEFT - RIGHT;
  }

  geometry() {
    const rows = this.data.rows.length;
    const rowH = Math.max(3, Math.min(16, Math.floor(420 / Math.max(rows, 1))));
    return {rows, rowH, plotW: this.plotWidth(), plotH: rowH * rows};
  }

  draw(data) {
    this.data = data;
    const {rows, rowH, plotW, plotH} = this.geometry();
    const ratio = window.devicePixelRatio || 1;
    const width = LEFT + plotW + RIGHT;
    const height = TOP + plotH + BOTTOM;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    const ctx = this.canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, width, height);
    const cols = data.columns;
    if (rows && cols) {
      const image = new ImageData(cols, rows);
      for (let r = 0; r < rows; r++) {
        const values = data.values[r];
        for (let c = 0; c < cols; c++) {
          const [red, green, blue] = colour(values[c]);
          const o = (r * cols + c) * 4;
          image.data[o] = red;
          image.data[o + 1] = green;
          image.data[o + 2] = blue;
          image.data[o + 3] = 255;
        }
      }
      const off = document.createElement('canvas');
      off.width = cols;
      off.height = rows;
      off.getContext('2d').putImageData(image, 0, 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(off, LEFT, TOP, plotW, plotH);
    }
    this.drawSteps(ctx, plotW, plotH);
    this.drawAxes(ctx, rowH, plotW, plotH);
    this.canvas.dataset.drawn = String(rows * cols);
  }

  x(t, plotW) {
    const span = Math.max(this.data.end - this.data.start, 1e-9);
    return LEFT + ((t - this.data.start) / span) * plotW;
  }

  drawSteps(ctx, plotW, plotH) {
    // Sparse boundaries (zoomed in) are full-height lines; dense ones are ticks above the plot, which would
    // otherwise wash the colours out.
    const bounds = this.data.step_boundaries;
    if (!bounds.length) return;
    const dense = bounds.length > plotW / 6;
    // Sparse lines: a dark halo under a white core, so that a mark shows on the darkest and the lightest cell.
    const passes = dense ? [['rgba(80,80,80,0.6)', 1]] : [['rgba(0,0,0,0.55)', 3], ['rgba(255,255,255,0.95)', 1]];
    for (const [colour, width] of passes) {
      ctx.strokeStyle = colour;
      ctx.lineWidth = width;
      ctx.beginPath();
      for (const t of bounds) {
        const x = Math.round(this.x(t, plotW)) + 0.5;
        ctx.moveTo(x, dense ? 1 : TOP);
        ctx.lineTo(x, dense ? TOP - 1 : TOP + plotH);
      }
      ctx.stroke();
    }
  }

  drawAxes(ctx, rowH, plotW, plotH) {
    ctx.fillStyle = '#333';
    ctx.font = '10px sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const every = Math.ceil(11 / rowH);
    this.data.rows.forEach((name, r) => {
      if (r % every === 0) ctx.fillText(name, LEFT - 4, TOP + r * rowH + rowH / 2);
    });
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    const ticks = Math.max(2, Math.floor(plotW / 120));
    const spacing = (this.data.end - this.data.start) / ticks;
    let previous = null;
    for (let i = 0; i <= ticks; i++) {
      const t = this.data.start + (i / ticks) * (this.data.end - this.data.start);
      const x = LEFT + (i / ticks) * plotW;
      const label = fmtClock(t, spacing); // decimals when zoomed below a second: labels never repeat
      if (label === previous) continue;
      previous = label;
      ctx.fillRect(x, TOP + plotH, 1, 4);
      ctx.fillText(label, Math.min(Math.max(x, LEFT + 30), LEFT + plotW - 30), TOP + plotH + 7);
    }
  }

  locate(event) {
    if (!this.data) return null;
    const rect = this.canvas.getBoundingClientRect();
    const {rows, rowH, plotW} = this.geometry();
    const px = event.clientX - rect.left;
    const py = event.clientY - rect.top;
    const fx = (px - LEFT) / plotW;
    const row = Math.floor((py - TOP) / rowH);
    const t = this.data.start + Math.max(0, Math.min(1, fx)) * (this.data.end - this.data.start);
    return {px, fx, row: row >= 0 && row < rows ? row : null, t};
  }

  startDrag(event) {
    const at = this.locate(event);
    if (!at || at.fx < 0 || at.fx > 1) return;
    this.drag = {from: at, px: at.px};
  }

  move(event) {
    const at = this.locate(event);
    if (!at || at.fx < 0 || at.fx > 1 || at.row === null) {
      this.tip.hidden = true;
      return;
    }
    const col = Math.min(this.data.columns - 1, Math.floor(at.fx * this.data.columns));
    const value = this.data.values[at.row][col];
    this.tip.textContent = `${this.data.rows[at.row]} · ${fmtTime(at.t)} · ${value === null ? 'no sample' : `${value} %`}`;
    this.tip.style.left = `${Math.min(at.px + 12, this.canvas.clientWidth - 160)}px`;
    this.tip.hidden = false;
    if (this.drag) this.drawSelection(this.drag.px, at.px);
  }

  drawSelection(a, b) {
    const ctx = this.canvas.getContext('2d');
    this.draw(this.data);
    ctx.fillStyle = 'rgba(255, 87, 34, 0.25)';
    const {plotH} = this.geometry();
    ctx.fillRect(Math.min(a, b), TOP, Math.abs(b - a), plotH);
  }

  endDrag(event) {
    if (!this.drag) return;
    const from = this.drag.from;
    this.drag = null;
    const to = this.locate(event);
    if (!to || Math.abs(to.px - from.px) < 4) {
      this.draw(this.data);
      return;
    }
    this.onZoom(Math.min(from.t, to.t), Math.max(from.t, to.t));
  }
}
