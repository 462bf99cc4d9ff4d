# Prefix-aware routing across hosts (issue 8), end to end: a real
# redis-server on a free port, three engine nginx instances publishing
# what their prefix caches hold (kvserve_index), and a gateway nginx that
# tokenizes each request and routes it to the host holding its longest
# prefix (kvserve_route + kvserve_prefix_balance), with a plain
# round-robin upstream of the same three hosts beside it as the baseline.
#
# 1. 30 users x 5 turns of chat through the gateway, each turn's messages
#    holding the previous replies, interleaved across users in a shuffled
#    order per round; the same for 30 other users through round robin, in
#    the same run.  From turn 2 on, at least 90% of the routed turns land
#    on the host holding their prefix, measured from the engines' own
#    usage.prompt_tokens_details.cached_tokens (round robin's figure, about
#    a third, is reported beside it); the gateway never believes a host
#    holds more than the engine then reuses;
# 1b. the next turn of three round-robin conversations streamed through
#    the routed location, once the index has settled: the SSE stream
#    whole, and routed to the host that served their last turn;
# 2. redis-server killed (kill -9) while turns are in flight and more are
#    sent: every request is answered 200 (routing falls back to hashing);
#    redis-server started again (empty): the engines republish and the
#    gateway routes by prefix again;
# 3. one engine host restarted (its nginx stopped and started: a new
#    engine incarnation), its old block entries still in Redis: from the
#    first request sent after the host's new record is in Redis (polled
#    with redis-cli; no wait for the gateway's background refresh, whose
#    table may still hold the old incarnation: each lookup's round 1
#    reads the records too), no request is routed on an entry of the old
#    incarnation (the gateway's believed cached tokens never exceed what
#    the chosen engine then reports).
#
# Skips when redis-server is not installed.  Every nginx, engine and the
# redis-server started here are stopped in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Cluster;
use JSON::PP ();
use List::Util qw(shuffle sum0);
use Time::HiRes qw(sleep time);

my $c = Kvserve::Cluster->new('020');
my $bt = 16;                        # the engines' kvserve_kv_block
my $n_users = 30;
my $n_turns = 5;
my $reply_len = 16;                 # max_tokens: every reply is this long
my $model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
my $name = 'kvserve-tiny';

my @eng = map { $c->live("e$_") } 1 .. 3;
my $gw = $c->live('gw');
my %host_of_port = map { ($eng[$_]->port => "e" . ($_ + 1)) } 0 .. 2;

END { $c->stop if $c }

# --- the cluster --------------------------------------------------------------

# the engines: the tiny default model (512-token context), 16-token
# blocks, a cache far larger than the run's working set (nothing is
# evicted), publishing to our redis-server under ids e1..e3
sub engine_conf {
    my ($i) = @_;
    my $e = $eng[$i];
    my $id = 'e' . ($i + 1);
    $e->write_conf(<<"EOC");
    kvserve_model $name $model;
    kvserve_kv_cache 64m;
    kvserve_kv_block $bt;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_index redis=@{[ $c->redis_addr ]} host_id=$id
                  advertise=http://127.0.0.1:@{[ $e->port ]};
EOC
}

# the gateway: the same model for its tokenizer and template only; /v1/
# routed by prefix, /rr/v1/ plain round robin over the same engines.
# Its routing decision comes back in response headers.
my $servers = join '', map { "        server 127.0.0.1:" . $_->port . ";\n" }
                           @eng;
#
# The load weight: these prompts are a few hundred tokens, so the default
# (256 cached tokens per running or queued sequence) would let a
# heartbeat that happened to catch one request running outweigh most of
# a conversation, and send its next turn elsewhere (reason "load"; seen
# on a loaded machine).  16, a block per sequence, keeps this test about
# prefixes; 018-gateway.t covers the load rule.
$gw->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model $name $model;
    kvserve_route_load_weight 16;

    upstream engines {
        kvserve_prefix_balance;
$servers    }

    upstream rr {
$servers    }
EOC
        location /v1/ {
            kvserve_route redis=@{[ $c->redis_addr ]};
            proxy_pass http://engines;
            proxy_buffering off;
            add_header X-Route-Reason \$kvserve_route_reason always;
            add_header X-Route-Host \$kvserve_route_host always;
            add_header X-Route-Cached \$kvserve_route_cached_tokens always;
            add_header X-Upstream \$upstream_addr always;
        }
        location /rr/v1/ {
            proxy_pass http://rr/v1/;
            proxy_buffering off;
            add_header X-Upstream \$upstream_addr always;
        }
EOS

ok($c->redis_start, 'redis-server started on ' . $c->redis_addr);
for my $i (0 .. 2) {
    engine_conf($i);
    ok($eng[$i]->start, "engine host e" . ($i + 1) . " started");
    ok($eng[$i]->engine_pid, "e" . ($i + 1) . ": its engine is up");
}
ok($gw->start, 'gateway started');

# every host's record in Redis (its heartbeat), within 20 s
ok($gw->wait_for(sub {
       my @ids = $c->redis('ZRANGE', 'kvs:v1:hosts', '0', '-1');
       my %r = map { $_ => 1 } @ids;
       return 3 == grep { $r{$_} && host_inc($_) } qw(e1 e2 e3);
   }, 20), 'e1, e2 and e3 registered in Redis');
ok($gw->wait_for(sub { $gw->workers_listing(3) >= 2 }, 20),
   "the gateway's two workers list the three hosts");

# --- requests -----------------------------------------------------------------

my $json = JSON::PP->new->canonical;

# The incarnation in host $id's record, as its 16 hex digits; nothing
# when there is no record.
sub host_inc {
    my ($id) = @_;
    my $v = $c->redis('GET', "kvs:v1:host:$id") // '';
    return $v =~ /(?:^| )inc=([0-9a-f]{16})(?: |$)/ ? $1 : undef;
}

# Which engine served a response: the last address in X-Upstream (a
# retried request lists every peer it tried).
sub served_by {
    my ($head) = @_;
    my ($a) = $head =~ /^X-Upstream: *(.*?)\r?$/mi;
    return '' unless defined $a;
    my ($port) = (split /, */, $a)[-1] =~ /:(\d+)$/;
    return $host_of_port{$port // 0} // "?$a";
}

sub header {
    my ($head, $h) = @_;
    my ($v) = $head =~ /^\Q$h\E: *(.*?)\r?$/mi;
    return $v // '';
}

# Sends $req to $uri on the gateway; returns the socket (not read yet).
sub send_req {
    my ($uri, $req) = @_;
    return $gw->request('POST', $uri, $json->encode($req));
}

# Reads the response on $s: { status, head, body (decoded JSON or
# undef) }.
sub read_resp {
    my ($s) = @_;
    my $r = $gw->read_all($s, 60);
    my ($head, $body) = $gw->split_response($r);
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    my $j = eval { $json->decode($body) };
    return { status => $status // 0, head => $head, body => $j,
             raw => $body };
}

# A letter whose repetition the tokenizer keeps one token per letter (as
# in 015-prefix-turns.t), asked of e1 directly: replies forced to it with
# logit_bias render back into the next prompt as exactly the generated
# ids, so each turn's prompt holds the previous turn's whole.
my ($letter, $lid);
for my $ch (split //, 'QZXJKVWY') {
    my @n;
    for my $k (12, 6) {
        my $s = $eng[0]->request('POST', '/v1/completions', $json->encode(
            { model => $name, prompt => $ch x $k, max_tokens => 1 }));
        my (undef, $b) = $eng[0]->split_response($eng[0]->read_all($s, 60));
        my $j = eval { $json->decode($b) };
        push @n, $j ? $j->{usage}{prompt_tokens} : -100;
    }
    if ($n[0] - $n[1] == 6) {
        ($letter, $lid) = ($ch, ord $ch);
        last;
    }
}
ok($letter, 'a letter that stays one token per letter: ' . ($letter // '-'))
    or BAIL_OUT('no reply letter');

# The conversations.  Every user shares the system prompt; each message
# is distinct (the user, the turn and seeded words).
my $system = 'You answer routing questions briefly and plainly.';
my @words = qw(apple river stone cloud maple tiger violet copper lantern
               meadow harbor pepper falcon quartz willow ember);
srand(20);

sub new_user {
    my ($path, $tag, $u) = @_;
    return { path => $path, tag => "$tag$u",
             msgs => [ { role => 'system', content => $system } ],
             turns => [] };
}

# Sends user $u's next turn (not read); read_turn() finishes it.
sub send_turn {
    my ($u) = @_;
    my $t = @{$u->{turns}} + 1;
    my $text = "User $u->{tag}, turn $t: "
               . join(' ', map { $words[int rand @words] } 1 .. 3)
               . ' ' . int(rand 9000 + 1000) . '?';
    push @{$u->{msgs}}, { role => 'user', content => $text };
    return send_req("$u->{path}chat/completions",
                    { model => $name, messages => [ @{$u->{msgs}} ],
                      max_tokens => $reply_len, temperature => 0,
                      logit_bias => { $lid => 100 } });
}

# Reads user $u's turn from $s; records and returns what it got:
# status, cached (the engine's cached_tokens), prompt and reply tokens,
# the serving host, the gateway's reason, chosen host and believed
# cached tokens, and whether the turn landed on the holder of its
# prefix (from turn 2 on; see below).
sub read_turn {
    my ($u, $s) = @_;
    my $r = read_resp($s);
    my $j = $r->{body};
    my $rec = {
        status => $r->{status},
        host   => served_by($r->{head}),
        reason => header($r->{head}, 'X-Route-Reason'),
        rhost  => header($r->{head}, 'X-Route-Host'),
        rcached => header($r->{head}, 'X-Route-Cached'),
    };
    if ($r->{status} == 200 && $j) {
        $rec->{cached} = $j->{usage}{prompt_tokens_details}{cached_tokens}
                         // -1;
        $rec->{prompt} = $j->{usage}{prompt_tokens};
        $rec->{reply} = $j->{usage}{completion_tokens};
        push @{$u->{msgs}}, { role => 'assistant',
                              content => $j->{choices}[0]{message}{content} };
    } else {
        diag("$u->{tag}: $r->{status}: $r->{raw}");
        pop @{$u->{msgs}};          # dropped: the conversation goes on
        return $rec;
    }

    # Landed on the holder: cached_tokens >= the previous turn's prompt
    # tokens rounded down to a block.  Only the host that served the
    # previous turn holds that much of this conversation: any other host
    # holds at most an earlier turn's prompt and reply, which the
    # previous prompt exceeds by that turn's user message and template
    # tokens (>= one block, checked in `growth` below), or the shared
    # system prompt, and the engine counts only what it reuses by
    # comparing tokens.  (The previous reply, forced to one token per
    # letter, is in the next prompt too, but whether the engine keeps
    # its last token is the engine's business: the criterion does not
    # need it.)
    my $prev = $u->{turns}[-1];
    if ($prev && defined $prev->{prompt}) {
        $rec->{want} = int($prev->{prompt} / $bt) * $bt;
        $rec->{landed} = $rec->{cached} >= $rec->{want} ? 1 : 0;
        $rec->{growth} = $rec->{prompt} - $prev->{prompt} - $prev->{reply};
    }
    push @{$u->{turns}}, $rec;
    return $rec;
}

sub turn {
    my ($u) = @_;
    return read_turn($u, send_turn($u));
}

# --- 1. routed versus round robin ---------------------------------------------

my @routed = map { new_user('/v1/', 'a', $_) } 1 .. $n_users;
my @rr = map { new_user('/rr/v1/', 'b', $_) } 1 .. $n_users;
my (@all_routed, @all_rr);

for my $t (1 .. $n_turns) {
    for my $k (shuffle 0 .. $n_users - 1) {
        push @all_routed, turn($routed[$k]);
        push @all_rr, turn($rr[$k]);
    }
}

is(scalar(grep { $_->{status} != 200 } @all_routed, @all_rr), 0,
   'every turn answered 200');

my @scored = grep { defined $_->{landed} } @all_routed;
my @scored_rr = grep { defined $_->{landed} } @all_rr;
is(scalar(@scored), $n_users * ($n_turns - 1), 'routed turns 2.. scored');
is(scalar(@scored_rr), $n_users * ($n_turns - 1), 'round robin turns scored');
is(scalar(grep { $_->{growth} < $bt } @scored, @scored_rr), 0,
   'each turn adds at least a block besides the reply (the criterion '
   . 'tells the holder apart)');

my $hit = sum0(map { $_->{landed} } @scored) / (@scored || 1);
my $hit_rr = sum0(map { $_->{landed} } @scored_rr) / (@scored_rr || 1);
my %reasons;
$reasons{$_->{reason}}++ for @scored;
diag(sprintf("turns 2..%d landed on the holder of their prefix: routed "
             . "%.1f%% (%d/%d), round robin %.1f%% (%d/%d); reasons: %s",
             $n_turns, 100 * $hit, sum0(map { $_->{landed} } @scored),
             scalar @scored, 100 * $hit_rr,
             sum0(map { $_->{landed} } @scored_rr), scalar @scored_rr,
             join(', ', map { "$_ $reasons{$_}" } sort keys %reasons)));
my @missed;
for my $u (@routed) {
    my @t = @{$u->{turns}};
    for my $i (grep { defined $t[$_]{landed} && !$t[$_]{landed} } 1 .. $#t) {
        push @missed, sprintf("%s turn %d: previous turn on %s (%d prompt "
                              . "tokens); routed to %s (%s, believed %s), "
                              . "cached %d of %d wanted", $u->{tag}, $i + 1,
                              $t[$i - 1]{host}, $t[$i - 1]{prompt},
                              $t[$i]{rhost}, $t[$i]{reason}, $t[$i]{rcached},
                              $t[$i]{cached}, $t[$i]{want});
    }
}
cmp_ok($hit, '>=', 0.9, 'routed: >= 90% of turns 2.. land on the holder')
    or diag(join "\n", @missed);
cmp_ok($hit_rr, '<', $hit, 'round robin lands less often');

# the gateway's belief against the engine's count: the chosen host holds
# what the index said (within the block the engine recomputes at the end)
is(scalar(grep { $_->{rcached} ne '' && $_->{rcached} > $_->{cached} + $bt }
          @scored), 0,
   'no routed turn believed more cached tokens than the engine reused');

# --- 1b. a stream through the gateway -----------------------------------------

# The next turn of three round-robin conversations, streamed through the
# routed location: SSE passes through whole (the chunked body ends
# properly, [DONE] last, the forced reply), and the gateway finds the
# host that served their last turn, though that turn came through round
# robin: the index lists what the engines hold, however it got there.
#
# The index is eventually consistent: a turn's blocks reach Redis a
# moment after its reply (the engine hands them to its publishing
# worker, which pipelines them), so a turn sent at once may still find
# the host of an earlier turn.  Section 1 allows for that (90%); here,
# where every turn must land, the test first waits until nothing has
# been published for half a second (Redis' HSET count, which only
# publishing moves, unchanged), at most 10 s.
sub index_settled {
    my ($last, $same, $t0) = (-1, 0, time);
    while (time - $t0 < 10) {
        my ($l) = grep { /^cmdstat_hset:/ } $c->redis('INFO', 'commandstats');
        my $n = $l && $l =~ /calls=(\d+)/ ? $1 : 0;
        $same = $n == $last ? $same + 1 : 0;
        $last = $n;
        return 1 if $same >= 5;
        sleep 0.1;
    }
    return 0;
}

ok(index_settled(), 'the index settled: no block published for 0.5 s');
for my $u (@rr[0 .. 2]) {
    my $prev = $u->{turns}[-1];
    push @{$u->{msgs}}, { role => 'user', content => "$u->{tag}: stream." };
    my $s = send_req('/v1/chat/completions', {
        model => $name, messages => [ @{$u->{msgs}} ],
        max_tokens => $reply_len, temperature => 0,
        logit_bias => { $lid => 100 }, stream => JSON::PP::true,
        stream_options => { include_usage => JSON::PP::true } });
    my ($head, $body, $ended) = $gw->split_response($gw->read_all($s, 60));
    my @data = $body =~ /^data: (.*?)\r?$/mg;
    my ($text, $usage) = ('', undef);
    for my $d (@data[0 .. $#data - 1]) {
        my $j = eval { $json->decode($d) } or next;
        $text .= $_->{delta}{content} // '' for @{$j->{choices} // []};
        $usage = $j->{usage} if $j->{usage};
    }
    my $want = int($prev->{prompt} / $bt) * $bt;
    ok($head =~ m{^HTTP/1\.1 200 } && $ended && @data && $data[-1] eq '[DONE]'
       && $text eq $letter x $reply_len,
       "$u->{tag}: streamed through the gateway, [DONE] last")
        or diag("$head\n$body");
    cmp_ok($usage ? $usage->{prompt_tokens_details}{cached_tokens} : -1,
           '>=', $want, "$u->{tag}: routed to the holder of its round-robin "
           . "turns (" . header($head, 'X-Route-Reason') . ')');
    pop @{$u->{msgs}};
}

# --- 2. redis-server killed mid-run -------------------------------------------

# turn 6 of every routed user, in waves of 5 concurrent requests; Redis
# is killed after the second wave is sent, before it is read
my @order = shuffle 0 .. $n_users - 1;
my @down;
my $killed = 0;
while (my @wave = splice @order, 0, 5) {
    my @socks = map { [ $routed[$_], send_turn($routed[$_]) ] } @wave;
    if (!$killed && @down == 5) {
        ok($c->redis_kill, 'redis-server killed (kill -9) with turns in '
                           . 'flight');
        $killed = 1;
    }
    push @down, read_turn(@$_) for @socks;
}
is(scalar(grep { $_->{status} != 200 } @down), 0,
   'Redis down: every turn answered 200 (' . scalar(@down) . ')');
my %dr;
$dr{$_->{reason}}++ for @down[10 .. $#down];
diag('reasons after the kill: '
     . join(', ', map { "$_ $dr{$_}" } sort keys %dr));
ok($dr{no_index}, 'routing fell back to hashing (no_index)');

# Redis back, empty: the engines re-register and republish what they
# hold, and the gateway routes by prefix again (reconnect backoff at
# most 5 s, host table refresh 1 s)
ok($c->redis_start, 'redis-server started again');
ok($gw->wait_for(sub { 3 == grep { host_inc($_) } qw(e1 e2 e3) }, 20),
   'the hosts registered again');
my $probe_reason = '';
ok($gw->wait_for(sub {
       my $r = read_resp(send_req('/v1/chat/completions', {
           model => $name, max_tokens => 1,
           messages => [ { role => 'system', content => $system },
                         { role => 'user', content => 'Probe.' } ] }));
       $probe_reason = header($r->{head}, 'X-Route-Reason');
       return $r->{status} == 200 && $probe_reason eq 'prefix';
   }, 30), "routing by prefix again (last reason: $probe_reason)");

# --- 3. one engine host restarted ---------------------------------------------

# the host that served most of the last turns: its entries are the
# longest prefixes of those conversations
my %last;
$last{$_->{turns}[-1]{host}}++ for @routed;
my ($victim) = sort { $last{$b} <=> $last{$a} || $a cmp $b }
               grep { /^e\d$/ } keys %last;
my $vi = substr($victim, 1) - 1;
my @victims = grep { $_->{turns}[-1]{host} eq $victim } @routed;
my $old_inc = host_inc($victim);
ok($old_inc, "$victim (last turn of " . scalar(@victims) . " users): "
             . "incarnation " . ($old_inc // '-'));

$eng[$vi]->stop;
ok($eng[$vi]->start, "$victim restarted");
ok($eng[$vi]->engine_pid, "$victim: its new engine is up");
my $new_inc;
ok($gw->wait_for(sub {
       $new_inc = host_inc($victim);
       return $new_inc && $new_inc ne $old_inc;
   }, 20), "$victim registered a new incarnation " . ($new_inc // '-'));

# No wait from here: the next turns go out at once, while the gateway's
# background table may still name the old incarnation (it is refreshed
# once a second).  Entries of the old incarnation are still in Redis
# (they expire only with their TTL), so that ignoring them is the
# gateway's doing; they are counted after the turns, not to delay them.
my @after;
for my $k (shuffle 0 .. $n_users - 1) {
    push @after, turn($routed[$k]);
}

my @keys = $c->redis('--scan', '--pattern', 'kvs:v1:blk:*');
my @vals = $c->redis_many(map { [ 'HGET', $_, $victim ] } @keys);
my $stale = grep { defined && $_ eq $old_inc } @vals;
cmp_ok($stale, '>', 0, "Redis still lists $stale blocks under ${victim}'s "
                       . "old incarnation");

is(scalar(grep { $_->{status} != 200 } @after), 0,
   'after the restart: every turn answered 200');
my @bad = grep { $_->{status} == 200 && $_->{rcached} ne ''
                 && $_->{rcached} > $_->{cached} + $bt } @after;
is(scalar(@bad), 0, 'after the restart: no turn routed on entries the '
                    . 'chosen engine does not hold')
    or diag(join "\n", map { "$_->{rhost} believed $_->{rcached}, "
                             . "$_->{host} reused $_->{cached}" } @bad);
# Only the old incarnation held a victim's turn-6 prompt (its earlier
# hosts hold at most turn 5's prompt and reply, a block short of it): a
# gateway that believes any host holds that much read an old entry.
my @old = grep { $_->[1]{rcached} ne ''
                 && $_->[1]{rcached} >= int($_->[0]{prompt} / $bt) * $bt }
          map { [ @{$_->{turns}}[-2, -1] ] }
          grep { @{$_->{turns}} == $n_turns + 2 } @victims;
is(scalar(@old), 0, "no conversation of $victim routed on its old "
                    . "incarnation's entries (" . scalar(@victims)
                    . " conversations)");
diag(sprintf("after the restart: %d/%d turns landed on the holder of their "
             . "prefix", scalar(grep { $_->{landed} } @after),
             scalar @after));

done_testing();
