# The prefix cache's disk tier (issue 26): `nginx -t` refuses what the
# engine would (a host tier unless the backend is cuda, a size that holds
# no block, an unknown model, a missing directory, two tiers of a kind for
# one model) and takes a host tier beside a disk tier on CUDA; a prompt evicted from a
# 16-block pool comes back from the disk tier, with cached_tokens_by_tier
# .disk > 0 and the reply it got when nothing was cached; a flipped byte
# in every slot of the file is detected (kv_tier_corrupt_blocks_total)
# and the reply is still that one; a restart on other weights discards
# the file (the engine's log says why) and loads nothing from it.
#
# The default tiny model: 512 B of K/V per token, blocks of 16 tokens:
# 8 KiB a block, 12 KiB a slot of the file.  Its prefill is so fast that
# the cost model may rightly prefer computing to reading the disk, so the
# tier is configured with load=always: what is tested is the loading.
#
# One nginx of our own (Kvserve::Live); every process it started is
# killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use JSON::PP ();
use Time::HiRes qw(sleep);

my $t = Kvserve::Live->new('043', 'tier');
my $model = $t->model_dir . '/default.gguf';
my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
my $root = $t->root;
my $file = "$root/tier/kv.tier";

# the engine runs as nginx's worker user: the file's directory must be
# writable by it
chmod 0777, "$root/tier";

END { $t->stop if $t }

# ---- nginx -t -------------------------------------------------------------

my ($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                                 . "kvserve_kv_tier host 1g;");
ok($failed, 'nginx -t refuses kvserve_kv_tier host (backend auto)');
like($out, qr/"kvserve_kv_tier host" is not supported: on the CPU backend the KV pool is host memory already.*it needs "kvserve_backend cuda"/,
     '... saying why');

($failed, $out) = $t->nginx_t("kvserve_backend cpu;\n"
                              . "kvserve_model m $model;\n"
                              . "kvserve_kv_tier host 1m;");
ok($failed, '... and on the CPU backend');

# on CUDA: a host tier, with a disk tier beside it (nginx -t needs no
# device; the engine opens the tiers when it starts)
($failed, $out) = $t->nginx_t("kvserve_backend cuda;\n"
                              . "kvserve_model m $model;\n"
                              . "kvserve_kv_tier host 1m;\n"
                              . "kvserve_kv_tier disk $file 1m;");
ok(!$failed, 'nginx -t takes a host tier and a disk tier on CUDA')
    or diag($out);

($failed, $out) = $t->nginx_t("kvserve_backend cuda;\n"
                              . "kvserve_model m $model;\n"
                              . "kvserve_kv_tier host 4k;");
ok($failed, 'a host tier that holds no block is refused');
like($out, qr/"kvserve_kv_tier host" in .*: size 4096 holds no block of model "m" \(8192 bytes a block\)/,
     '... naming the sizes');

($failed, $out) = $t->nginx_t("kvserve_backend cuda;\n"
                              . "kvserve_model m $model;\n"
                              . "kvserve_kv_tier host 1m;\n"
                              . "kvserve_kv_tier host 2m;");
ok($failed, 'a second host tier for the same model is refused');
like($out, qr/"kvserve_kv_tier host" is duplicate/, '... as such');

($failed, $out) = $t->nginx_t("kvserve_backend cuda;\n"
                              . "kvserve_model m $model;\n"
                              . "kvserve_kv_tier host 1m model=x;");
ok($failed, 'a host tier for a model not served is refused');
like($out, qr/"kvserve_kv_tier host" in .*: no model "x" is served/,
     '... naming it');

($failed, $out) = $t->nginx_t("kvserve_backend cuda;\n"
                              . "kvserve_model m $model;\n"
                              . "kvserve_kv_tier host 1m load=always;");
ok($failed, 'a disk parameter on a host tier is refused');
like($out, qr/invalid value "load=always" in "kvserve_kv_tier" directive, it must be one "model=NAME"/,
     '... quoting it');

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_tier disk $file 8k;");
ok($failed, 'nginx -t refuses a tier that holds no block');
like($out, qr/size 8192 holds no block of model "m" \(12288 bytes a block, at least 16384\)/,
     '... naming the sizes');

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_tier disk $file 1m model=x;");
ok($failed, 'nginx -t refuses a tier for a model not served');
like($out, qr/no model "x" is served/, '... naming it');

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_tier disk $root/none/kv 1m;");
ok($failed, 'nginx -t refuses a tier in a missing directory');
like($out, qr/no directory "\Q$root\E\/none"/, '... naming it');

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_tier disk $file 1m;\n"
                              . "kvserve_kv_tier disk $file.2 1m;");
ok($failed, 'a second tier for the same model is refused');
like($out, qr/"kvserve_kv_tier" is duplicate/, '... as such');

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_tier disk $file 1m load=never;");
ok($failed, 'an unknown parameter is refused');
like($out, qr/invalid value "load=never" in "kvserve_kv_tier" directive, it must be one "model=NAME" and one "load=cost" or "load=always"/,
     '... quoting it');

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_tier disk $file lots;");
ok($failed, 'a bad size is refused');
like($out, qr/invalid value "lots" in "kvserve_kv_tier" directive/,
     '... quoting it');

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_tier disk $file 1m model=m;");
ok(!$failed, 'nginx -t takes a disk tier') or diag($out);

# ---- serving --------------------------------------------------------------

sub conf {
    my ($m) = @_;
    $t->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model m $m;
    kvserve_backend cpu;
    kvserve_kv_cache 128k;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
    kvserve_kv_tier disk $file 1m load=always;
EOC
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
        location = /metrics { kvserve_metrics; }
EOS
}

# A greedy completion of $prompt: (text, usage)
sub complete {
    my ($prompt, $what) = @_;
    my $r = $t->read_all($t->request('POST', '/v1/completions',
        JSON::PP::encode_json({ model => 'm', prompt => $prompt,
                                max_tokens => 8, temperature => 0,
                                ignore_eos => JSON::PP::true })), 60);
    my ($head, $body) = $t->split_response($r);
    like($head, qr{^HTTP/1\.1 200}, "$what: 200") or diag($r);
    my $j = eval { JSON::PP::decode_json($body) } || {};
    return ($j->{choices}[0]{text}, $j->{usage} || {});
}

sub metric {
    my ($name) = @_;
    my (undef, $body) = $t->split_response($t->read_all(
        $t->request('GET', '/metrics'), 10));
    my ($v) = $body =~ /^kvserve:\Q$name\E\{model_name="m"[^}]*\} (\S+)$/m;
    return $v;
}

# distinct prompts of some 100 tokens: 6 or 7 blocks of a 16-block pool
sub prompt {
    my ($k) = @_;
    return join ' ', map { "story $k part $_ of the tale" } 1 .. 12;
}

# runs four other prompts: the pool keeps none of what came before, and
# their evictions reach the file
sub evict {
    my ($from) = @_;
    complete(prompt($_), "filler $_") for $from .. $from + 3;
    sleep 1;
}

conf($model);
ok($t->start, 'nginx started with a disk tier');
ok($t->wait_for(sub { $t->log_count(qr/disk tier ".*kv\.tier" \((?:O_DIRECT|buffered)\): 85 blocks of 12288 bytes, 0 kept/) == 1 }, 30),
   'the engine opened the tier: 85 slots of 12 KiB')
    or BAIL_OUT('no engine with a tier: ' . `tail -5 ${\ $t->log_path}`);
$t->engine_pid;

my ($cold, $u) = complete(prompt(0), 'cold');
is($u->{prompt_tokens_details}{cached_tokens}, 0, 'cold: nothing cached');
is($u->{prompt_tokens_details}{cached_tokens_by_tier}{disk}, 0,
   '... nothing from the disk');
my $pt = $u->{prompt_tokens};
ok($pt > 64, "the prompt has $pt tokens");

evict(100);
ok(metric('kv_tier_spilled_blocks_total') > 0, 'evicted blocks spilled');
ok(metric('kv_tier_blocks') > 0, '... and the tier holds them');

my ($hot, $h) = complete(prompt(0), 'from the tier');
is($hot, $cold, 'the reply is the cold one');
my $disk = $h->{prompt_tokens_details}{cached_tokens_by_tier}{disk} // 0;
ok($disk >= 64, "cached_tokens from the disk tier: $disk");
is($h->{prompt_tokens_details}{cached_tokens_by_tier}{pool}
   + $disk, $h->{prompt_tokens_details}{cached_tokens},
   'pool + disk = cached_tokens');
ok(metric('kv_tier_loaded_blocks_total') >= 4, 'loaded blocks counted');
my (undef, $mbody) = $t->split_response($t->read_all(
    $t->request('GET', '/metrics'), 10));
my ($mdisk) = $mbody =~ /^kvserve:prefix_cache_hit_tokens_by_tier_total\{model_name="m",tier="disk"\} (\d+)$/m;
is($mdisk, $disk, 'the metrics count the disk tier hits');
like($mbody, qr/^kvserve:kv_tier_load_seconds_total\{model_name="m"\} \d+\.\d+$/m,
     'the load time is counted');
ok(metric('kv_tier_load_waits_total') >= 1,
   'the request waited for its load, counted');
like($mbody, qr/^kvserve:kv_tier_load_wait_seconds_total\{model_name="m"\} \d+\.\d+$/m,
     'the wait is timed');
is(metric('kv_tier_loading_requests'), 0, 'no load under way after it');

# ---- a flipped byte in every slot -------------------------------------------

evict(200);
is(metric('kv_tier_corrupt_blocks_total'), 0, 'nothing corrupt yet');
{
    open my $fh, '+<:raw', $file or die "$file: $!";
    my $size = -s $file;
    for (my $off = 4096 + 512 + 64 + 100; $off < $size; $off += 12288) {
        sysseek($fh, $off, 0) or die "seek: $!";
        sysread($fh, my $b, 1) == 1 or die "read: $!";
        sysseek($fh, $off, 0) or die "seek: $!";
        syswrite($fh, chr(ord($b) ^ 0x40)) == 1 or die "write: $!";
    }
    close $fh;
}
my ($again, $af) = complete(prompt(0), 'after the flips');
is($again, $cold, 'the reply is still the cold one');
is($af->{prompt_tokens_details}{cached_tokens_by_tier}{disk}, 0,
   '... and nothing came from the disk');
is(metric('kv_tier_corrupt_blocks_total'), 1,
   'the first block read was found corrupt');

# ---- a restart on other weights ---------------------------------------------

SKIP: {
    skip "no kvserve tool at $cli", 4 unless -x $cli;
    my $other = "$root/other.gguf";
    system("'$cli' gen-model --preset tiny --name kvserve-tiny --seed 2 "
           . "'$other' >/dev/null 2>&1") == 0 or die "gen-model failed";

    # the other model's blocks: a run that spills some of its own
    $t->stop;
    conf($other);
    ok($t->start, 'nginx restarted on other weights');
    ok($t->wait_for(sub { $t->log_count(qr/disk tier .* 0 kept; discarded: weight epoch/) == 1 }, 30),
       'the engine discarded the file: another weight epoch');
    $t->engine_pid;
    my (undef, $o) = complete(prompt(0), 'other weights');
    is($o->{prompt_tokens_details}{cached_tokens_by_tier}{disk}, 0,
       'nothing of the old file is loaded');
}

# but for the engine that $t->stop killed for the restart
is($t->log_count(qr/\[alert\](?!.*exited on signal 9)|\[emerg\]/), 0,
   'no alert meanwhile');

done_testing();
