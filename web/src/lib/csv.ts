// CSV written in the browser (the deadlines report), escaped as the
// server's exports are (internal/spreadsheet: EscapeFormula): a text cell
// that a spreadsheet program would run as a formula gets a leading
// apostrophe.

const FORMULA = new Set(['=', '+', '-', '@', '\uFF1D', '\uFF0B', '\uFF0D', '\uFF20']);

/**
 * escapeFormula defuses a text cell that starts with a tab, a carriage
 * return or a line feed, or whose first character other than white space
 * is = + - @ or a full-width form of one (＝ ＋ － ＠).
 */
export function escapeFormula(s: string): string {
  if (s === '') return s;
  if (s[0] === '\t' || s[0] === '\r' || s[0] === '\n') return "'" + s;
  for (const ch of s) {
    if (FORMULA.has(ch)) return "'" + s;
    if (!/\s/u.test(ch)) return s;
  }
  return s;
}

/** csvCell is one cell: text escaped against formulas, quoted when it must be (RFC 4180). */
export function csvCell(v: string | number | null | undefined): string {
  if (v === null || v === undefined) return '';
  const s = typeof v === 'number' ? String(v) : escapeFormula(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** toCSV is the rows as CSV text, CRLF between rows. */
export function toCSV(rows: (string | number | null | undefined)[][]): string {
  return rows.map((r) => r.map(csvCell).join(',')).join('\r\n') + '\r\n';
}

/** downloadCSV offers the text as a file. */
export function downloadCSV(name: string, text: string) {
  // A BOM, so that spreadsheet programs read the UTF-8 (Chinese keys).
  const url = URL.createObjectURL(new Blob(['\uFEFF' + text], { type: 'text/csv;charset=utf-8' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
