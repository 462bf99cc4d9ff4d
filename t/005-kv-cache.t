# kvserve_kv_cache, kvserve_kv_block, kvserve_max_batch_tokens and
# kvserve_threads under `nginx -t`: good values pass and the module logs
# the engine's numbers and each model's KV cache plan, whose numbers are
# worked out here from the model's hyper-parameters (kvserve info --json
# when the tool is beside the models, else the tiny preset's, as in
# 001-models.t); a cache that cannot hold a full context is warned about;
# every bad value fails nginx-style, quoting the value, with the line.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use JSON::PP;
use Kvserve::NginxT;
use Test::More;

my $t = Kvserve::NginxT->new('kv-cache');
my $model = $t->model;
my $conf = qr/in \S+nginx\.conf:\d+/;

# kvserve-tiny (gen-model --preset tiny): 2 layers, 2 KV heads of 16,
# context 512
my %hp = (n_layer => 2, n_head_kv => 2, head_dim_k => 16, head_dim_v => 16,
          n_ctx_train => 512);
my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
if (-x $cli) {
    my $json = `$cli info --json $model`;
    is($?, 0, 'kvserve info --json reads the model') or diag($json);
    %hp = %{ decode_json($json)->{hparams} };
}

# the CPU cache is F32: K and V, every layer, every KV head
my $bpt = $hp{n_layer} * $hp{n_head_kv}
          * ($hp{head_dim_k} + $hp{head_dim_v}) * 4;
my $n_ctx = $hp{n_ctx_train};

# Bytes as the log writes them: "512 B", else one decimal in the largest
# binary unit under 1024 ("1.0 MiB").
sub size {
    my ($n) = @_;
    return "$n B" if $n < 1024;
    my @units = qw(KiB MiB GiB TiB PiB EiB);
    my $v = $n / 1024;
    my $u = 0;
    while ($v >= 1023.95 && $u < $#units) { $v /= 1024; $u++ }
    return sprintf('%.1f %s', $v, $units[$u]);
}

# Runs nginx -t with the model as "tiny", $http after it in the http
# block; returns (exit status, everything nginx printed).
sub nginx_t {
    my ($http, $server) = @_;
    return $t->nginx_t("kvserve_model tiny $model;\n    $http", $server);
}

# The NOTICE line for a plan of $bytes of cache in blocks of $bt tokens,
# from the value $value (a size).
sub plan_line {
    my ($name, $bytes, $bt, $value, $tail) = @_;
    my $blocks = int($bytes / ($bpt * $bt));
    my $tokens = $blocks * $bt;
    my $re = qr/\[notice\] .*kvserve: model "\Q$name\E": KV cache /
        . quotemeta(size($blocks * $bt * $bpt)) . qr/ = $blocks blocks x $bt /
        . qr/tokens \($tokens tokens, / . quotemeta(size($bpt)) . qr/\/token\), /
        . qr/from kvserve_kv_cache \Q$value$tail\E\n/;
    return qr/$re/;
}

my ($status, $out);

# --- sizes -----------------------------------------------------------------

for my $case (['1m', 1 << 20], ['1M', 1 << 20], ['1048576', 1 << 20],
              ['1024k', 1 << 20], ['12K', 12 << 10 ], ['2g', 2 << 30],
              ['8000000', 8000000])
{
    my ($value, $bytes) = @$case;
    ($status, $out) = nginx_t("kvserve_kv_cache $value;");
    is($status, 0, "kvserve_kv_cache $value passes nginx -t") or diag($out);
    like($out, plan_line('tiny', $bytes, 16, $value, ''),
         "... and the plan is logged with its numbers");
}

# 3K does not hold one block of 16 tokens of the tiny model (8 KiB)
if (3 << 10 < $bpt * 16) {
    ($status, $out) = nginx_t('kvserve_kv_cache 3K;');
    isnt($status, 0, 'a cache smaller than one block fails nginx -t');
    like($out, qr/\[emerg\] .*kvserve_kv_cache "3K" is too small for model "tiny": kv cache: 3072 bytes hold no block of 16 tokens \(${\($bpt * 16)} bytes\)/,
         '... saying how big a block is');
}

# block sizes 1, 64 and 1024 on 1 MiB
for my $bt (1, 64, 1024) {
    ($status, $out) = nginx_t("kvserve_kv_cache 1m; kvserve_kv_block $bt;");
    is($status, 0, "kvserve_kv_block $bt passes nginx -t") or diag($out);
    like($out, plan_line('tiny', 1 << 20, $bt, '1m', ''),
         "... and blocks are of $bt tokens");
    like($out, qr/kvserve: engine: .*, KV blocks of $bt tokens\n/,
         '... in the engine line too');
}

# a full context needs ceil(n_ctx / 16) blocks: one block short warns,
# exactly enough does not
my $need = int(($n_ctx + 15) / 16);
my $fits = $need * 16 * $bpt;
($status, $out) = nginx_t("kvserve_kv_cache $fits;");
is($status, 0, "a cache of exactly one full context passes") or diag($out);
like($out, plan_line('tiny', $fits, 16, $fits, ''), '... with its plan');
unlike($out, qr/\[warn\]/, '... and no warning');

my $short = $fits - 1;
($status, $out) = nginx_t("kvserve_kv_cache $short;");
is($status, 0, "a cache one byte short of a full context passes")
    or diag($out);
like($out, plan_line('tiny', $short, 16, $short, ''), '... with its plan');
my $tokens = ($need - 1) * 16;
like($out, qr/\[warn\] .*kvserve: model "tiny": the KV cache holds $tokens tokens, less than one sequence of the model's context of $n_ctx tokens \($need blocks\); requests that need more are rejected/,
     '... and a warning that a full context does not fit');

# two models share the budget equally
($status, $out) = $t->nginx_t("kvserve_model a $model;
    kvserve_model b $model;
    kvserve_kv_cache 2m;");
is($status, 0, 'two models with one cache pass') or diag($out);
my $by_need = ', 50.0% of it by need (' . size($bpt) . '/token x 512 tokens '
    . 'x 4 sequences)';
like($out, plan_line('a', 1 << 20, 16, '2m', $by_need),
     '... the first gets half (the same need)');
like($out, plan_line('b', 1 << 20, 16, '2m', $by_need),
     '... and so does the second');

# --- fractions of the available memory -------------------------------------

my $files = size(-s $model);
for my $value ('0.5', '1.0', '.25', '0.001', '1.', '') {
    my $shown = $value eq '' ? '0.5' : $value;
    ($status, $out) = nginx_t($value eq '' ? '' : "kvserve_kv_cache $value;");
    is($status, 0, $value eq '' ? 'the default passes nginx -t'
                                : "kvserve_kv_cache $value passes nginx -t")
        or diag($out);
    my ($blocks, $tok, $avail) = $out =~ /kvserve: model "tiny": KV cache \S+ \S+ = (\d+) blocks x 16 tokens \((\d+) tokens, \Q${\size($bpt)}\E\/token\), from kvserve_kv_cache \Q$shown\E of (\S+ \S+) available \(MemAvailable \S+ \S+ less \Q$files\E of model files\)\n/;
    ok(defined $blocks,
       "... logging $shown of MemAvailable less the model file's size")
        or diag($out), next;
    is($tok, $blocks * 16, '... in blocks of 16 tokens');

    # the shown availability is rounded to 0.1 of its unit: within 5%
    my %unit = (B => 1, KiB => 1 << 10, MiB => 1 << 20, GiB => 1 << 30,
                TiB => 2 ** 40);
    my ($num, $u) = split / /, $avail;
    my $want = $shown * $num * $unit{$u};
    my $got = $blocks * 16 * $bpt;
    ok($got <= $want * 1.05 && $got >= $want * 0.95 - 16 * $bpt,
       "... about $shown of what is available ($got bytes, want ~$want)");
}

# --- the engine's numbers --------------------------------------------------

my $ncpu = `getconf _NPROCESSORS_ONLN`;
chomp $ncpu;
($status, $out) = nginx_t('kvserve_kv_cache 1m;');
like($out, qr/\[notice\] .*kvserve: engine: $ncpu compute threads \(auto: online CPUs\), steps of up to 2048 tokens, KV blocks of 16 tokens\n/,
     'by default: a thread per online CPU, 2048 tokens a step, 16 a block');

for my $case (['kvserve_threads auto;', "$ncpu compute threads \\(auto"],
              ['kvserve_threads 1;', '1 compute threads,'],
              ['kvserve_threads 3;', '3 compute threads,'],
              ['kvserve_threads 1024;', '1024 compute threads,'],
              ['kvserve_max_batch_tokens 1;', 'steps of up to 1 tokens'],
              ['kvserve_max_batch_tokens 512;', 'steps of up to 512 tokens'],
              ['kvserve_max_batch_tokens 1048576;',
               'steps of up to 1048576 tokens'])
{
    my ($http, $want) = @$case;
    ($status, $out) = nginx_t("kvserve_kv_cache 1m; $http");
    is($status, 0, "$http passes nginx -t") or diag($out);
    like($out, qr/kvserve: engine: .*$want/, '... and is logged');
}

# --- bad values --------------------------------------------------------------

my %reason = (
    '1.5'   => 'fraction must be in (0, 1]',
    '0.0'   => 'fraction must be in (0, 1]',
    '0'     => 'size must be greater than 0',
    '0m'    => 'size must be greater than 0',
    '12x'   => 'not a size (bytes, or with a k, m or g suffix) or a fraction in (0, 1]',
    '1t'    => 'not a size (bytes, or with a k, m or g suffix) or a fraction in (0, 1]',
    '-1'    => 'not a size (bytes, or with a k, m or g suffix) or a fraction in (0, 1]',
    '1mb'   => 'not a size (bytes, or with a k, m or g suffix) or a fraction in (0, 1]',
    '0.5m'  => 'not a fraction such as 0.5',
    '1e-1'  => 'not a size (bytes, or with a k, m or g suffix) or a fraction in (0, 1]',
    '50%'   => 'not a size (bytes, or with a k, m or g suffix) or a fraction in (0, 1]',
    ''      => 'empty, expected a size such as 512m or a fraction such as 0.5',
    '18446744073709551616' => 'size overflows 64 bits',
    '17179869184g'         => 'size overflows 64 bits',
);

for my $value (sort keys %reason) {
    ($status, $out) = nginx_t(qq{kvserve_kv_cache "$value";});
    isnt($status, 0, qq{kvserve_kv_cache "$value" fails nginx -t});
    like($out, qr/\[emerg\] .*invalid value "\Q$value\E" in "kvserve_kv_cache" directive, \Q$reason{$value}\E $conf/,
         '... quoting the value, with the reason and the line');
}

my @numbers = (
    ['kvserve_kv_block', 1, 1024, '', qw(0 1025 -1 abc 16k 1.5 4294967312)],
    ['kvserve_max_batch_tokens', 1, 1048576, '', qw(0 -5 x 1048577 2k)],
    ['kvserve_threads', 1, 1024, ' or "auto"', qw(0 1025 Auto AUTO -1 2.0)],
);
for my $d (@numbers) {
    my ($name, $lo, $hi, $or, @bad) = @$d;
    for my $value (@bad, '', 'auto ') {
        next if $value eq 'auto ' && $or eq '';
        ($status, $out) = nginx_t(qq{kvserve_kv_cache 1m; $name "$value";});
        isnt($status, 0, qq{$name "$value" fails nginx -t});
        like($out, qr/\[emerg\] .*invalid value "\Q$value\E" in "$name" directive, it must be a number from $lo to $hi\Q$or\E $conf/,
             '... quoting the value, with the bounds and the line');
    }
}

for my $d (['kvserve_kv_cache', '1m', '2m'], ['kvserve_kv_block', 16, 32],
           ['kvserve_max_batch_tokens', 1, 2],
           ['kvserve_threads', 'auto', 2])
{
    my ($name, $a, $b) = @$d;
    ($status, $out) = nginx_t("$name $a; $name $b;");
    isnt($status, 0, "$name twice fails nginx -t");
    like($out, qr/"$name" directive is duplicate $conf/, '... as a duplicate');

    ($status, $out) = nginx_t("$name;");
    isnt($status, 0, "$name without a value fails nginx -t");
    like($out, qr/invalid number of arguments in "$name" directive $conf/,
         '... saying so');

    ($status, $out) = nginx_t('',
        "$name $a; location /v1/ { kvserve; }");
    isnt($status, 0, "$name in a server block fails nginx -t");
    like($out, qr/"$name" directive is not allowed here $conf/,
         '... as only the http block may set it');
}

$t->done;
done_testing();
