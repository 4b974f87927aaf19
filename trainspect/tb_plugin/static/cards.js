// The generic Profiler-tab card: a table declared once in Python (trainspect/tb_plugin/cards.py) and listed by
// the /cards route. The card fetches its own route with the arguments it declares and formats each column by its
// unit (units of the metric catalogue). Every value from a run goes through textContent (util.el / util.table).

import {clear, el, fetchJSON, fmtUnit, table} from './util.js';

function cell(column) {
  if (column.unit === 'text') return (row) => (row[column.key] === null || row[column.key] === undefined ? '–' : String(row[column.key]));
  return (row) => fmtUnit(row[column.key], column.unit_from ? row[column.unit_from] : column.unit);
}

export class TableCard {
  constructor(spec) {
    this.spec = spec;
    this.body = el('div', {class: 'scroll'});
    this.root = el('section', {class: 'card', 'data-card': spec.id}, el('h3', {text: spec.title}), this.body);
    this.columns = spec.columns.map((c) => ({label: c.label, value: cell(c), class: c.unit === 'text' ? 'name' : 'num'}));
  }

  // params: what the view knows (run, node, start, end); only the arguments the card declares are sent.
  async refresh(params) {
    const query = {run: params.run};
    for (const arg of this.spec.args) if (params[arg.name] !== undefined) query[arg.name] = params[arg.name];
    try {
      this.draw((await fetchJSON(this.spec.id, query)).rows || []);
    } catch (err) {
      clear(this.body).append(el('p', {class: 'muted', text: `Could not load: ${err.message}`}));
    }
  }

  draw(rows) {
    clear(this.body);
    if (!rows.length) this.body.append(el('p', {class: 'muted', text: this.spec.empty}));
    else this.body.append(table(this.columns, rows));
  }
}

// The generic cards of the registry (those with a table), in registry order.
export async function tableCards() {
  const listing = await fetchJSON('cards');
  return listing.cards.filter((c) => c.columns.length).map((c) => new TableCard(c));
}
