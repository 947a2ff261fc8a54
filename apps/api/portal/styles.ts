/** A file of its own: the CSP allows no inline style. System fonts only; one column under 40 rem, to read at 360 px. */
export const PORTAL_CSS = `
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--bg:#fff;--soft:#f6f8fa;--accent:#0a58ca;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--skip:#6e7781;color-scheme:light}
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--accent)}
:focus-visible{outline:3px solid var(--accent);outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:.5rem;top:.5rem;background:var(--bg);padding:.5rem;z-index:2}
.top{display:flex;justify-content:space-between;align-items:center;gap:1rem;padding:.75rem 1rem;border-bottom:1px solid var(--line);flex-wrap:wrap}
.brand{font-weight:700}.who{color:var(--muted);font-size:.875rem}
[hidden]{display:none!important}
nav{display:flex;gap:.25rem;padding:.5rem 1rem;border-bottom:1px solid var(--line);overflow-x:auto;background:var(--soft)}
nav a{padding:.5rem .75rem;border-radius:6px;text-decoration:none;white-space:nowrap;color:var(--fg)}
nav a[aria-current=page]{background:var(--bg);box-shadow:inset 0 -3px 0 var(--accent);font-weight:600}
main{max-width:72rem;margin:0 auto;padding:1rem}
main:focus{outline:none}
h1{font-size:1.5rem;margin:.5rem 0 1rem}h2{font-size:1.15rem;margin:1.5rem 0 .5rem}
.card{border:1px solid var(--line);border-radius:8px;padding:1rem;margin:0 0 1rem}.card h2{margin-top:0}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(9rem,1fr));gap:.75rem;margin:0 0 1rem;padding:0;list-style:none}
.tiles li{border:1px solid var(--line);border-radius:8px;padding:.75rem}
.tiles b{display:block;font-size:1.5rem}
.tiles span{color:var(--muted);font-size:.875rem}
dl.facts{display:grid;grid-template-columns:minmax(7rem,max-content) 1fr;gap:.25rem 1rem;margin:0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%;font-size:.9375rem}
th,td{text-align:left;padding:.4rem .5rem;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--soft);white-space:nowrap}
caption{text-align:left;color:var(--muted);padding:.25rem 0}
code,pre{font:.875rem/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:.75rem;overflow:auto;max-height:28rem;white-space:pre}
.badge{display:inline-block;padding:0 .5rem;border-radius:999px;font-size:.8125rem;font-weight:600;border:1px solid currentColor}
.s-delivered{color:var(--ok)}.s-retrying{color:var(--warn)}.s-failed{color:var(--bad)}.s-skipped{color:var(--skip)}
form.filters{display:grid;grid-template-columns:repeat(auto-fit,minmax(11rem,1fr));gap:.75rem;align-items:end;margin:0 0 1rem}
label{display:block;font-weight:600;font-size:.875rem;margin:0 0 .25rem}
input,select,button,textarea{font:inherit;min-height:2.5rem}
input[type=text],input[type=url],input[type=datetime-local],select{width:100%;padding:.35rem .5rem;border:1px solid var(--muted);border-radius:6px;background:var(--bg);color:var(--fg)}
input[type=checkbox]{min-height:auto;width:1.1rem;height:1.1rem;vertical-align:middle;margin-right:.4rem}
fieldset{border:1px solid var(--line);border-radius:8px;margin:0 0 1rem;padding:.75rem}
legend{font-weight:600;padding:0 .25rem}
.check{display:block;font-weight:400;font-size:1rem;margin:.25rem 0}
button{padding:.4rem 1rem;border-radius:6px;border:1px solid var(--accent);background:var(--accent);color:#fff;cursor:pointer}
button.secondary{background:var(--bg);color:var(--accent)}
button.danger{background:var(--bad);border-color:var(--bad)}
button:disabled{opacity:.6;cursor:not-allowed}
.row{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin:.5rem 0}
.field{margin:0 0 1rem}
.note{color:var(--muted);font-size:.875rem}
.alert{border-left:4px solid var(--bad);background:#fff5f5;padding:.5rem .75rem;margin:.5rem 0}
.ok{border-left:4px solid var(--ok);background:#f0fff4;padding:.5rem .75rem;margin:.5rem 0}
.info{border-left:4px solid var(--accent);background:#f1f6ff;padding:.5rem .75rem;margin:.5rem 0}
progress{width:100%;height:1.25rem}
.chart{width:100%;height:auto;display:block}
.chart .delivered{fill:var(--ok)}.chart .retrying{fill:#d4a72c}.chart .failed{fill:var(--bad)}.chart .skipped{fill:#afb8c1}
.chart .axis{fill:var(--muted);font-size:10px}.chart line{stroke:var(--line)}
.legend{display:flex;flex-wrap:wrap;gap:1rem;margin:.5rem 0;padding:0;list-style:none;font-size:.875rem}
.legend i{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin-right:.35rem;vertical-align:-1px}
.legend .delivered{background:var(--ok)}.legend .retrying{background:#d4a72c}.legend .failed{background:var(--bad)}.legend .skipped{background:#afb8c1}
.secret{width:100%;font-family:ui-monospace,monospace}
.visually-hidden{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
@media (max-width:40rem){main{padding:.75rem}dl.facts{grid-template-columns:1fr}dl.facts dt{margin-top:.5rem}h1{font-size:1.3rem}}
`;
