"""The import graph of dlproc (and its mapped packages sim, boards, firmware): print every circle.

Deferred imports inside functions count (they still tie two modules together); only imports under
`if TYPE_CHECKING:` are exempt. Usage: python tests/import_graph.py [dlproc] [-v]."""
import ast, pathlib, sys, collections
root = pathlib.Path(sys.argv[1] if len(sys.argv)>1 else 'dlproc')
mods = {}
srcs = [(root, 'dlproc')] + [(root.parent / f, 'dlproc.' + f) for f in ('sim', 'boards', 'firmware')]
for base, pkgname in srcs:
  for p in base.rglob('*.py'):
    rel = p.relative_to(base).with_suffix('')
    name = '.'.join([pkgname, *rel.parts])
    if name.endswith('.__init__'): name = name[:-9]
    mods[name] = p
def resolve(name, p, node):
    pkg = name if p.name == '__init__.py' else name.rsplit('.',1)[0]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = pkg.split('.')
            base = base[:len(base)-node.level+1]
            mod = '.'.join(base + ([node.module] if node.module else []))
        else: mod = node.module
        out = []
        for a in node.names:
            full = mod + '.' + a.name
            out.append(full if full in mods else mod)
        return out
    return [a.name for a in node.names]
edges = collections.defaultdict(set)
for name, p in mods.items():
    tree = ast.parse(p.read_text())
    tc = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and 'TYPE_CHECKING' in ast.unparse(n.test):
            for m in ast.walk(n): tc.add(id(m))
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in tc:
            for t in resolve(name, p, n):
                while t and t not in mods: t = t.rsplit('.',1)[0] if '.' in t else ''
                if t and t != name: edges[name].add(t)
# SCCs
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0]+=1; st.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in mods:
    if v not in idx: sc(v)
for s in sccs: print('CIRCLE', sorted(s))
if '-v' in sys.argv:
    for k in sorted(edges): print(k, '->', sorted(edges[k]))
