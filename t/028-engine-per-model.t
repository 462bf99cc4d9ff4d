# One engine process per model (docs/engine-process.md, "One engine
# process per model"; issue 20 points 3 and 4), on one nginx of our own
# with worker_processes 2 and three models, a, b and c (copies of the
# tiny default model under other paths and mtimes: three files):
#
# 1. nginx -t refuses a model file the engine could not load (an unknown
#    architecture, a missing tensor), naming the model and the reason;
#    kvserve_model's kv_cache= gives a model its own KV budget, the others
#    share kvserve_kv_cache by need, and bad parameters fail naming them;
# 2. each model gets its own engine process, its own lease file and its
#    own KV cache share, logged at startup;
# 3. b's engine is killed (SIGKILL) again and again until the respawn
#    backoff holds it down: a request for b answers 503 naming b and the
#    reason, /v1/models marks b unavailable with that reason, while a
#    and c serve, and a repeated prompt on a still hits its cache; then
#    b serves again;
# 4. a reload that changes c's file only: the stream of c in flight
#    finishes on the old engine (the old weights), new requests of c go
#    to a new engine, a and b keep their engines, and a's repeated
#    prompt still hits its cache.
#
# Every nginx and engine process started here is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use File::Copy ();
use JSON::PP ();
use Time::HiRes qw(sleep time);

my $t = Kvserve::Live->new('028', 'models');
my $root = $t->root;
my $src = $t->model_dir . "/default.gguf";

# a, b, c, c2: copies, each its own file (another mtime each)
my %file;
my $k = 0;
for my $name (qw(a b c c2)) {
    $file{$name} = "$root/models/$name.gguf";
    File::Copy::copy($src, $file{$name}) or die "copy: $!";
    my $mtime = (stat $src)[9] - 100 * ++$k;
    utime $mtime, $mtime, $file{$name} or die "utime: $!";
}

# the same bytes but one, patched in place (same length)
sub patched {
    my ($name, $from, $to) = @_;
    open my $in, '<:raw', $src or die "$src: $!";
    my $bytes = do { local $/; <$in> };
    close $in;
    my $at = index($bytes, $from);
    die "\"$from\" not in $src" if $at < 0;
    substr($bytes, $at, length $from) = $to;
    my $path = "$root/models/$name.gguf";
    open my $out, '>:raw', $path or die "$path: $!";
    print $out $bytes;
    close $out or die "$path: $!";
    return $path;
}

# "general.architecture" is followed by its value: u32 type 8, u64
# length 5, "llama"
my $bad_arch = patched('bad-arch', "general.architecture\x08\0\0\0\x05\0\0\0"
                       . "\0\0\0\0llama",
                       "general.architecture\x08\0\0\0\x05\0\0\0"
                       . "\0\0\0\0llamx");
# a tensor's name in the tensor infos, renamed
my $bad_tensor = patched('bad-tensor', 'output_norm.weight',
                         'output_norm.weighx');

my $tuning = <<'EOC';
    kvserve_kv_cache 64m;
    kvserve_threads 1;
    kvserve_engine_wait 1s;
    kvserve_max_sequences 64;
EOC

sub models_conf {
    my (%f) = @_;
    return join('', map { "    kvserve_model $_ $f{$_};\n" } sort keys %f)
        . $tuning;
}

END { $t->stop if $t }

# --- 1. nginx -t refuses what the engine would -------------------------------

my ($failed, $out) = $t->nginx_t(models_conf(a => $file{a}, b => $bad_arch,
                                             c => $file{c}));
ok($failed, 'nginx -t fails with an unknown architecture in b');
like($out, qr/\[emerg\] .*kvserve_model "b": .*architecture 'llamx' is not supported/,
     '... naming the model and the architecture');

($failed, $out) = $t->nginx_t(models_conf(a => $file{a}, b => $file{b},
                                          c => $bad_tensor));
ok($failed, 'nginx -t fails with a missing tensor in c');
like($out, qr/\[emerg\] .*kvserve_model "c": .*output_norm\.weight/,
     '... naming the model and the tensor');

($failed, $out) = $t->nginx_t(models_conf(a => $file{a}, b => $file{b},
                                          c => $file{c}));
ok(!$failed, 'nginx -t accepts the three good files') or diag($out);

# kv_cache=: a's own budget; b and c share kvserve_kv_cache by need (the
# same need: halves of 64m)
($failed, $out) = $t->nginx_t("    kvserve_model a $file{a} kv_cache=8m;\n"
                              . models_conf(b => $file{b}, c => $file{c}));
ok(!$failed, 'kv_cache= is accepted') or diag($out);
my $own = qr/kvserve: model "a": KV cache 8\.0 MiB = 1024 blocks x 16 /
          . qr/tokens \(16384 tokens, 512 B\/token\), from kv_cache=8m\n/;
like($out, qr/$own/,
     '... a has its own 8m');
my $shared = qr/kvserve: model "b": KV cache 32\.0 MiB = 4096 blocks x 16 /
    . qr/tokens \(65536 tokens, 512 B\/token\), from kvserve_kv_cache /
    . qr/64m, 50\.0% of it by need \(512 B\/token x 512 tokens x 4 /
    . qr/sequences\)\n/;
like($out, qr/$shared/,
     '... b and c share kvserve_kv_cache by need');

for my $case (["kv_cache=12x", qr/kvserve_model "a": invalid parameter /
                                   . qr/"kv_cache=12x": .*12x/],
              ["kv_cache=", qr/kvserve_model "a": unknown parameter /
                                . qr/"kv_cache="/],
              ["kv_cahce=1m", qr/kvserve_model "a": unknown parameter /
                                  . qr/"kv_cahce=1m" \(known: kv_cache=/],
              ["kv_cache=1m kv_cache=2m", qr/kvserve_model "a": duplicate /
                                          . qr/parameter "kv_cache=2m"/],
              ["kv_cache=1k", qr/kvserve_model "a": kv_cache=1k is too /
                              . qr/small: .*hold no block/])
{
    my ($param, $re) = @$case;
    ($failed, $out) = $t->nginx_t("    kvserve_model a $file{a} $param;\n"
                                  . $tuning);
    ok($failed, "nginx -t fails with $param");
    like($out, qr/\[emerg\] .*$re/, '... naming it');
}

# --- 2. three models, three engine processes ----------------------------------

my $server = <<'EOS';
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
        location = /metrics { kvserve_metrics; }
EOS
$t->write_conf(models_conf(a => $file{a}, b => $file{b}, c => $file{c}),
               server => $server);
ok($t->start, 'nginx started');

sub complete {
    my ($model, $prompt, $max) = @_;
    my $body = JSON::PP::encode_json({model => $model, prompt => $prompt,
                                      max_tokens => $max // 4});
    return $t->read_all($t->request('POST', '/v1/completions', $body), 25);
}

# the last engine pid the log says was started for $model
sub engine_of {
    my ($model) = @_;
    open my $fh, '<', $t->log_path or return 0;
    my $pid = 0;
    while (my $l = <$fh>) {
        $pid = $1
            if $l =~ /started engine process (\d+) for model "\Q$model\E"/;
    }
    return $pid;
}

for my $m (qw(a b c)) {
    like(complete($m, 'Once'), qr{^HTTP/1\.1 200 .*"finish_reason"}s,
         "model $m is served");
}

my %pid = map { $_ => engine_of($_) } qw(a b c);
ok($pid{a} && $pid{b} && $pid{c}, "an engine for each: @pid{qw(a b c)}");
is(scalar(keys %{{ map { $_ => 1 } values %pid }}), 3, '... three processes');
$t->{engines}{$_} = 1 for values %pid;
for my $m (qw(a b c)) {
    is($t->lease_pid($m), $pid{$m}, "$m\'s lease file names its engine");
    my $cmdline = `cat /proc/$pid{$m}/cmdline 2>/dev/null`;
    $cmdline =~ tr/\0/ /;
    like($cmdline, qr/engine process for model $m/,
         "... which says whose it is");
}

is($t->log_count(qr/kvserve: model "[abc]": KV cache .*, 33\.3% of it by /
                 . qr/need \(/), 3,
   'each model\'s KV share is logged, by need');

my $status = (split /\r\n\r\n/, $t->read_all($t->request('GET', '/status'),
                                              25), 2)[1];
my $sj = eval { JSON::PP::decode_json($status) } // {};
is(join(',', map { "$_->{name}:$_->{engine_pid}" } @{$sj->{models} // []}),
   "a:$pid{a},b:$pid{b},c:$pid{c}",
   'kvserve_status lists each model with its own engine');

# a prompt of several KV blocks, twice: the second reads the cache
my $long = 'Once upon a time there was a little cat who lived in a house. '
           x 4;
complete('a', $long);
my ($hit) = complete('a', $long) =~ /"cached_tokens":(\d+)/;
ok(($hit // 0) > 0, "a's repeated prompt hits its cache ($hit tokens)");

# --- 3. b's engine dies and stays down a while -------------------------------

# each young death doubles the respawn delay: 100, 200, 400, 800, 1600 ms
my $killed = 0;
my $b = $pid{b};
for my $round (1 .. 5) {
    kill 'KILL', $b;
    $killed++;
    last if $round == 5;
    my $next;
    $t->wait_for(sub { $next = engine_of('b'); $next && $next != $b }, 10)
        or last;
    $t->{engines}{$next} = 1;
    $b = $next;
}
is($killed, 5, "b's engine killed 5 times, each respawned but the last");

# b is in its 1.6 s backoff: b waits kvserve_engine_wait (1 s) and gets
# 503; a and c are served meanwhile
my $sb = $t->request('POST', '/v1/completions',
                     '{"model": "b", "prompt": "Once", "max_tokens": 4}');
my $ra = complete('a', 'Once');
my $rc = complete('c', 'Once');
my $rb = $t->read_all($sb, 25);
like($rb, qr{^HTTP/1\.1 503 }, 'a request for b answers 503');
like($rb, qr/"message":"The engine for model \\"b\\" \(pid \d+\) (?:exited|died)[^"]*Retry later\."/,
     '... naming the model and the reason') or diag($rb);
like($rb, qr/"code":"model_unavailable"/, '... with its code');
like($ra, qr{^HTTP/1\.1 200 }, 'a is served meanwhile');
like($rc, qr{^HTTP/1\.1 200 }, '... and c too');

my $models = (split /\r\n\r\n/, $t->read_all($t->request('GET', '/v1/models'),
                                              25), 2)[1];
my $mj = eval { JSON::PP::decode_json($models) } // {};
my %avail = map { $_->{id} => $_->{kvserve} } @{$mj->{data} // []};
ok(!$avail{b}{available}, '/v1/models: b is unavailable');
like($avail{b}{unavailable_reason} // '',
     qr/^engine for model "b" \(pid \d+\) (exited|died)/, '... saying why');
ok($avail{a}{available} && !defined $avail{a}{unavailable_reason},
   '... a is available');
my $metrics = $t->read_all($t->request('GET', '/metrics'), 25);
like($metrics, qr/^kvserve:model_available\{model_name="b"\} 0$/m,
     '/metrics: model_available is 0 for b');
like($metrics, qr/^kvserve:model_available\{model_name="a"\} 1$/m,
     '... and 1 for a');

($hit) = complete('a', $long) =~ /"cached_tokens":(\d+)/;
ok(($hit // 0) > 0, "a still hits its cache ($hit tokens)");
is(engine_of('a'), $pid{a}, '... on the same engine');
ok($t->alive($pid{a}) && $t->alive($pid{c}), 'a\'s and c\'s engines live');

ok($t->wait_for(sub { complete('b', 'Once') =~ m{^HTTP/1\.1 200 } }, 15),
   'b serves again after its backoff');
ok($t->log_count(qr/kvserve: engine \d+ lived \d+ ms: the next one starts /
                 . qr/in \d+ ms \(model "b"\)/),
   'the backoff was logged for b');
$t->{engines}{engine_of('b')} = 1;

# --- 4. a reload that changes c's file only ----------------------------------

my $bias = '{"507": -100, "508": -100, "511": -100}';
my $s = $t->request('POST', '/v1/completions',
                    '{"model": "c", "prompt": "Once upon a time", "n": 32, '
                    . '"max_tokens": 400, "stream": true, '
                    . "\"logit_bias\": $bias}");
my $got = $t->read_until($s, qr/data: \{/, 30);
like($got, qr/data: \{/, 'a long stream on c started');

my $starts = $t->log_count(qr/started engine process/);
$t->write_conf(models_conf(a => $file{a}, b => $file{b}, c => $file{c2}),
               server => $server);
kill 'HUP', $t->master_pid;

my $t0 = time;
my $new_c;
ok($t->wait_for(sub {
       complete('c', 'Once') =~ m{^HTTP/1\.1 200 }
       && ($new_c = engine_of('c')) != $pid{c} }, 30),
   sprintf('c is served by a new engine after the reload (%.1f s)',
           time - $t0));
$t->{engines}{$new_c} = 1 if $new_c;
my $old_alive = $t->alive($pid{c});
ok($t->log_count(qr/DRAIN sent \(model "c": another file\)/),
   'a new worker sent DRAIN to c\'s old engine');

($hit) = complete('a', $long) =~ /"cached_tokens":(\d+)/;
ok(($hit // 0) > 0, "a's repeated prompt still hits after the reload "
                    . "($hit tokens)");
is($t->log_count(qr/started engine process/), $starts + 1,
   'one engine started by the reload: c\'s');
is(engine_of('a'), $pid{a}, 'a kept its engine');
ok($t->alive($pid{a}), '... which still runs');

$got = $t->read_all($s, 120, $got);
my (undef, $body, $ended) = $t->split_response($got);
like($body, qr/data: \[DONE\]\n\n\z/, 'c\'s old stream ended with [DONE]');
unlike($body, qr/data: \{"error"/, '... and no error event');
ok($ended, '... and a proper end of the chunked body');
my @fin = $body =~ /"finish_reason":"length"/g;
is(scalar @fin, 32, '... every choice ran to max_tokens');
ok($old_alive, '... on the old engine, alive after the new one served')
    or diag('the stream ended before the new engine was up');
ok($t->wait_for(sub { !$t->alive($pid{c}) }, 30),
   'then c\'s old engine exited');

done_testing();
