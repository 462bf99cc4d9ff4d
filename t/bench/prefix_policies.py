#!/usr/bin/env python3
"""Block-level replay of a chat trace's events through cache policies.

t/bench/prefix_policies.py: the eviction rules compared in
docs/performance.md ("Prefix cache", "Rules tried") and
docs/prefix-cache.md, each against Belady's bound on the same pool
model as bench_prefix's replay (a pool holding the running requests'
blocks as well as the cache).  Synthetic traces follow bench_prefix's
plan (a random user among those with turns left, or round robin; 4 in
flight; first-in first-out ends); turns per user fixed, drawn 2..14, or
geometric.  Standard library only.  Run:

    python3 t/bench/prefix_policies.py [--policies lru,deep,adapt:0.5/4,...]
        [--variants "fixed8 s2,rr"] [--events FILE]

--events replays a recorded run: lines "S r u p" (request r of user u
submitted with p prompt tokens) and "F r u kv" (it ended having
computed kv tokens).

Events: ('S', r, u, p) submit request r of user u with p prompt tokens;
('F', r, u, kv) request r ends having computed kv tokens.
Chains: block j < SB of any user is the shared system block j; block j
>= SB of user u is (u, j).
"""
import random, sys, math
from collections import defaultdict

BT = 16


def load(path):
    ev = []
    for line in open(path):
        a = line.split()
        ev.append((a[0], int(a[1]), int(a[2]), int(a[3])))
    return ev


def gen(users=32, turns=8, tmin=None, tmax=None, system=512, mmin=32,
        mmax=96, reply=32, conc=4, rr=False, seed=1, geo=None):
    """Synthetic events: like bench_prefix's plan (random user among
    those with turns left, or round robin), FIFO completion."""
    rng = random.Random(seed)
    if tmin is not None:
        nt = [rng.randint(tmin, tmax) for _ in range(users)]
    elif geo is not None:
        nt = []
        for _ in range(users):
            t = 1
            while rng.random() < geo and t < 40:
                t += 1
            nt.append(t)
    else:
        nt = [turns] * users
    left = nt[:]
    plan = []
    total = sum(nt)
    if rr:
        i = 0
        while len(plan) < total:
            u = i % users
            if left[u] > 0:
                plan.append(u)
                left[u] -= 1
            i += 1
    else:
        act = [u for u in range(users) if left[u] > 0]
        while act:
            u = rng.choice(act)
            plan.append(u)
            left[u] -= 1
            if left[u] == 0:
                act.remove(u)
    hist = [system] * users
    used = [False] * len(plan)
    running = set()
    inflight = []  # (r, u, kv)
    ev = []
    sub = 0
    head = 0
    while sub < len(plan) or inflight:
        while len(inflight) < conc:
            i = head
            while i < len(plan) and (used[i] or plan[i] in running):
                i += 1
            if i >= len(plan):
                break
            used[i] = True
            while head < len(plan) and used[head]:
                head += 1
            u = plan[i]
            hist[u] += rng.randint(mmin, mmax)
            ev.append(('S', sub, u, hist[u]))
            running.add(u)
            inflight.append((sub, u))
            sub += 1
        r, u = inflight.pop(0)
        hist[u] += reply
        ev.append(('F', r, u, hist[u]))
        running.discard(u)
    return ev


def blk(u, j, sb):
    return ('s', j) if j < sb else (u, j)


def next_uses(ev, sb):
    """For each S event index, and each block, the list of S event
    indices (in order) reading it."""
    uses = defaultdict(list)
    for i, e in enumerate(ev):
        if e[0] == 'S':
            for j in range(e[3] // BT):
                uses[blk(e[2], j, sb)].append(i)
    return uses


def prompt_total(ev):
    return sum(e[3] for e in ev if e[0] == 'S')


def ws_blocks(ev, sb):
    last = {}
    for e in ev:
        if e[0] == 'F':
            last[e[2]] = e[3] // BT
    return sb + sum(n - sb for n in last.values())


# ---------------------------------------------------------------------
# The current bound: cache of cap blocks, blocks added at submission,
# Belady with bypass or LRU leaves; no room for running requests.

def replay_old(ev, cap, sb, lru=False):
    uses = next_uses(ev, sb)
    ptr = defaultdict(int)
    kvlen = {}
    for e in ev:
        if e[0] == 'F':
            kvlen[e[1]] = e[3]
    cached = set()
    last = {}
    hits = 0
    for i, e in enumerate(ev):
        if e[0] != 'S':
            continue
        _, r, u, p = e
        rd = p // BT
        k = 0
        while k < rd and blk(u, k, sb) in cached:
            k += 1
        hits += min(k * BT, p - 1)
        wr = kvlen[r] // BT
        for j in range(wr):
            last[blk(u, j, sb)] = i
        for j in range(wr):
            x = blk(u, j, sb)
            if x in cached:
                continue
            if len(cached) >= cap:
                def nu(y):
                    l = uses.get(y, [])
                    q = ptr[y]
                    while q < len(l) and l[q] <= i:
                        q += 1
                    ptr[y] = q
                    return l[q] if q < len(l) else 1 << 60
                if lru:
                    v = min(cached, key=lambda y: (last[y], -y[1]))
                else:
                    v = x
                    vn = nu(x)
                    for y in cached:
                        yn = nu(y)
                        if yn > vn or (yn == vn and y[1] > v[1]):
                            v, vn = y, yn
                if v == x:
                    continue
                cached.discard(v)
            cached.add(x)
    return hits


# ---------------------------------------------------------------------
# The pool model: N blocks hold the tree and the running requests'
# blocks; a running request's prefix is locked; its blocks are
# allocated at submission (prompt + reply), evicting tree leaves.

class Pool:
    def __init__(self, ev, n, sb, policy, params=None):
        self.ev = ev
        self.n = n
        self.sb = sb
        self.policy = policy
        self.params = params or {}
        self.tree = {}         # block -> meta dict (per block)
        self.depth = defaultdict(int)  # user -> cached user blocks count
        self.lock = defaultdict(int)   # block -> locks
        self.private = 0
        self.run = {}          # r -> (u, k, priv)
        self.hits = 0
        self.over = 0
        self.clock = 0
        self.L = 0.0           # GDSF inflation
        self.arr = 0
        self.gsum = 0
        self.gn = 0
        self.uses = next_uses(ev, sb)
        self.ptr = defaultdict(int)
        self.meta = defaultdict(lambda: {'last': 0, 'n': 0, 'first': 0,
                                          'prio': 0.0, 'ins': 0})
        self.dead = set()
        lastS = {}
        for i, e in enumerate(ev):
            if e[0] == 'S':
                lastS[e[2]] = i
        self.lastS = lastS
        self.evicted_from = defaultdict(int)
        # 'adapt': evicts from the LRU end or the MRU end of the list;
        # a lookup that stops at a block evicted in the last g x pool
        # evictions votes against the end that evicted it; the rule
        # turns when the votes reach +-s (hysteresis)
        self.mru = False
        self.votes = 0
        self.n_evicted = 0
        self.ghost = {}             # block -> (evicted by MRU, when)
        self.g = self.params.get('g', 0.5)
        self.s = int(self.params.get('s', 4))

    def nu(self, y, i):
        l = self.uses.get(y, [])
        q = self.ptr[y]
        while q < len(l) and l[q] <= i:
            q += 1
        self.ptr[y] = q
        return l[q] if q < len(l) else 1 << 60

    def leaves(self):
        """Evictable leaves: chain tails (user, j)."""
        out = []
        sysleaf = True
        for u, d in self.depth.items():
            if d > 0:
                sysleaf = False
                x = (u, self.sb + d - 1)
                if self.lock[x] == 0:
                    out.append(x)
        if sysleaf:
            j = max((b[1] for b in self.tree if b[0] == 's'), default=-1)
            if j >= 0 and self.lock[('s', j)] == 0:
                out.append(('s', j))
        return out

    def prio(self, x, i):
        """Lower is evicted first."""
        pol = self.policy
        u = x[0]
        m = self.meta[u]
        if x[0] == 's':
            return (1 << 60,)
        if pol == 'lru':
            return (m['last'],)
        if pol == 'deep':
            return (-x[1], m['last'])
        if pol == 'lfu':
            return (m['n'], m['last'])
        if pol == 'oracle_dead_lru':
            return (0 if i > self.lastS[u] else 1, m['last'])
        dead = 0 if i > self.lastS[u] else 1
        if pol == 'od_deep':
            return (dead, -x[1], m['last'])
        if pol == 'od_mru':
            return (dead, -m['last'])
        if pol == 'od_short':
            return (dead, x[1], m['last'])
        if pol == 'gdsf':
            return (m['prio'],)
        if pol.startswith('pred'):
            # predicted next arrival from this user's own gaps (in
            # arrivals); overdue chains count as further the longer
            # they are overdue
            now = self.arr
            gs = m.get('gaps', [])
            if gs:
                g = gs[-1] if pol == 'pred_last' else sum(gs) / len(gs)
            else:
                g = self.gsum / self.gn if self.gn else 32
            nxt = m['lastS'] + g
            if nxt < now:
                nxt = now + self.params.get('a', 1.0) * (now - nxt)
            return (-nxt, -x[1])
        if pol == 'lru_a':
            return (m['last'] - self.params['a'] * x[1],)
        if pol == 'lru_size':
            # aging by time, long chains evicted sooner
            a = self.params.get('a', 1.0)
            return (m['last'] - a * x[1],)
        if pol == 'mru':
            return (-m['last'],)
        if pol == 'adapt':
            return (-m['last'],) if self.mru else (m['last'],)
        raise ValueError(pol)

    def evict(self, need, i):
        while self.n - len(self.tree) - self.private < need:
            if self.policy == 'belady':
                cand = [x for x in self.tree if self.lock[x] == 0]
                if not cand:
                    break
                v = max(cand, key=lambda y: (self.nu(y, i), y[1]))
            else:
                lv = self.leaves()
                if not lv:
                    break
                v = min(lv, key=lambda y: self.prio(y, i))
                if self.policy == 'gdsf':
                    self.L = max(self.L, self.meta[v[0]]['prio'])
            del self.tree[v]
            if self.policy == 'adapt':
                self.n_evicted += 1
                self.ghost[v] = (self.mru, self.n_evicted)
            if v[0] != 's':
                self.depth[v[0]] -= 1
            self.evicted_from[v[0]] += 1
        free = self.n - len(self.tree) - self.private
        if free < need:
            self.over += need - free

    def vote(self, x):
        gh = self.ghost.get(x)
        if gh is None or self.n_evicted - gh[1] > self.g * self.n:
            return
        self.votes += -1 if gh[0] else 1
        self.votes = max(-self.s, min(self.s, self.votes))
        if self.votes == self.s:
            self.mru = True
        elif self.votes == -self.s:
            self.mru = False

    def touch(self, u, i, kind):
        m = self.meta[u]
        self.clock += 1
        m['last'] = self.clock
        if kind == 'S':
            m['n'] += 1
            self.arr += 1
            if 'lastS' in m:
                m.setdefault('gaps', []).append(self.arr - m['lastS'])
                self.gsum += self.arr - m['lastS']
                self.gn += 1
            m['lastS'] = self.arr
        if self.policy == 'gdsf':
            c = self.params.get('c', 1.0)
            m['prio'] = self.L + c * m['n'] / max(1, self.depth[u] + 1)

    def go(self):
        sb = self.sb
        for i, e in enumerate(self.ev):
            if e[0] == 'S':
                _, r, u, p = e
                rd = p // BT
                k = 0
                while k < rd and blk(u, k, sb) in self.tree:
                    k += 1
                self.hits += min(k * BT, p - 1)
                if self.policy == 'adapt' and k < rd:
                    self.vote(blk(u, k, sb))
                for j in range(k):
                    self.lock[blk(u, j, sb)] += 1
                self.touch(u, i, 'S')
                # blocks it will need: prompt + reply (reply length from
                # its F event)
                kv = self.kv[r]
                priv = -(-kv // BT) - k
                self.evict(priv, i)
                self.private += priv
                self.run[r] = (u, k, priv)
            else:
                _, r, u, kv = e
                u, k, priv = self.run.pop(r)
                self.private -= priv
                for j in range(k):
                    self.lock[blk(u, j, sb)] -= 1
                for j in range(k, kv // BT):
                    x = blk(u, j, sb)
                    if x not in self.tree:
                        self.tree[x] = 1
                        if x[0] != 's':
                            self.depth[u] += 1
                self.touch(u, i, 'F')
        return self.hits

    def run_all(self):
        self.kv = {e[1]: e[3] for e in self.ev if e[0] == 'F'}
        return self.go()


def pool_for(ev, frac, sb, conc=4, mmax=96, reply=32):
    ws = ws_blocks(ev, sb)
    max_new = (mmax + reply + BT - 1) // BT + 1
    return int(frac * ws + 0.999) + conc * max_new


VARIANTS = {
    'fixed8 s2': lambda: gen(seed=2),
    'fixed8 s3': lambda: gen(seed=3),
    'rr': lambda: gen(rr=True, seed=2),
    'turns2-14 s4': lambda: gen(tmin=2, tmax=14, seed=4),
    'turns2-14 s5': lambda: gen(tmin=2, tmax=14, seed=5),
    'geo0.85 s6': lambda: gen(geo=0.85, seed=6),
    'geo0.85 s7': lambda: gen(geo=0.85, seed=7),
    '64u s8': lambda: gen(users=64, seed=8),
    '64u t2-14 rr': lambda: gen(users=64, tmin=2, tmax=14, rr=True, seed=9),
}


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--policies', default='lru,deep,lfu,mru')
    ap.add_argument('--variants', default=','.join(VARIANTS))
    ap.add_argument('--events', help='a recorded run to replay as well')
    ap.add_argument('--system-blocks', type=int, default=32)
    a = ap.parse_args()

    sb = a.system_blocks
    traces = [(v, VARIANTS[v]) for v in a.variants.split(',') if v]
    if a.events:
        traces.insert(0, (a.events, lambda: load(a.events)))

    print('trace cache pool belady% then each rule as % of belady')
    for name, make in traces:
        ev = make()
        total = prompt_total(ev)
        for frac in (0.5, 0.25):
            n = pool_for(ev, frac, sb)
            best = Pool(ev, n, sb, 'belady').run_all()
            row = ['%-14s %.2f n=%4d belady=%.2f'
                   % (name, frac, n, 100.0 * best / total)]
            for pol in a.policies.split(','):
                params = {}
                if ':' in pol and pol.startswith('adapt'):
                    pol, x = pol.split(':')
                    g, s = x.split('/')
                    params = {'g': float(g), 's': float(s)}
                elif ':' in pol:
                    pol, x = pol.split(':')
                    params = {'a': float(x), 'c': float(x)}
                h = Pool(ev, n, sb, pol, params).run_all()
                row.append('%s=%.1f' % (pol, 100.0 * h / best))
            print(*row, flush=True)


if __name__ == '__main__':
    main()
