# Quantized GGUF files through nginx (issue 19): models written by
# `kvserve quantize` in the usual mixes each serve a chat completion, and
# a file with a tensor of a type kvserve cannot compute with is refused
# at configuration time, so that no engine is ever started for it.
#
# The K-quants and IQ4_XS have blocks of 256, wider than the default tiny
# model's 64-element rows (whose tensors would all fall back to the
# 32-element types), so the mixes are made from a model generated here
# with rows of 256 and 768; one more, Q4_K_M of the default model itself,
# shows the fallback serving too.  The IQ2_XXS file is a generated F32
# model whose blk.0.attn_q.weight type field says IQ2_XXS (16), its
# bytes, fewer than F32's, fitting in the same place.
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

my $t = Kvserve::Live->new('027', 'models');
my $root = $t->root;
my $dir = "$root/models";
my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
plan(skip_all => "no kvserve tool at $cli") unless -x $cli;

END { $t->stop if $t }

sub cli_ok {
    my ($what, @args) = @_;
    my $out = `'$cli' @args 2>&1`;
    is($?, 0, $what) or diag($out);
}

cli_ok('a 256-wide model generated',
       "gen-model --dim 256 --ffn 768 --heads 4 --kv-heads 2 --layers 2"
       . " --vocab 512 --seed 19 --name q256 $dir/base.gguf");

my @mixes = qw(q4_k_m q5_k_m q6_k q4_0 iq4_xs);
for my $m (@mixes) {
    cli_ok("kvserve quantize --type $m",
           "quantize $dir/base.gguf $dir/$m.gguf --type $m");
}
my $default = $t->model_dir . "/default.gguf";
cli_ok('kvserve quantize --type q4_k_m of the default model',
       "quantize $default $dir/tiny-q4_k_m.gguf --type q4_k_m");

# kvserve bench on a mix, warm-up rounds first (their steps left out of
# the figures): 40-token prompts take the CPU's wide prefill passes
my $bench = `'$cli' bench $dir/q4_k_m.gguf --seqs 2 --prompt 40 --gen 3 --threads 1 --warmup 2 2>&1`;
is($?, 0, 'kvserve bench --warmup 2 runs') or diag($bench);
like($bench, qr/^prefill: 80 tokens in /m,
     '... prefill counts the timed round alone');
like($bench, qr/^decode: 4 tokens in 2 decode-only steps/m,
     '... and so does decode');
$bench = `'$cli' bench $dir/q4_k_m.gguf --warmup 17 2>&1`;
is($? >> 8, 2, 'kvserve bench --warmup 17 is refused');
like($bench, qr/--warmup: expected an integer between 0 and 16, got "17"/,
     '... naming the bad value');

# what kvserve info says of a mixed file: its types, all computable
my $info = `'$cli' info $dir/q4_k_m.gguf 2>&1`;
# 2 layers: llama.cpp's use_more_bits picks layer 1 alone
like($info, qr/blk\.1\.attn_v\.weight\s+Q6_K/,
     'info: Q4_K_M has Q6_K attn_v on layer 1');
like($info, qr/blk\.0\.attn_v\.weight\s+Q4_K/, '... Q4_K on layer 0');
like($info, qr/blk\.0\.ffn_up\.weight\s+Q4_K/, '... and elsewhere');
like($info, qr/output\.weight\s+Q6_K/, '... Q6_K output');
unlike($info, qr/cannot compute/, '... every tensor computable');

# the IQ2_XXS file
cli_ok('an F32 model generated', "gen-model --dim 256 --ffn 256 --heads 4"
       . " --kv-heads 2 --layers 1 --vocab 512 --seed 5 $dir/iq2.gguf");
{
    open my $fh, '+<:raw', "$dir/iq2.gguf" or die "iq2: $!";
    my $bytes = do { local $/; <$fh> };
    my $name = 'blk.0.attn_q.weight';
    my $at = index($bytes, pack('Q<', length $name) . $name);
    die "no $name in the file" if $at < 0;
    # name, u32 n_dims (2), two u64 dims, then the u32 type
    $at += 8 + length($name) + 4 + 16;
    is(unpack('V', substr($bytes, $at, 4)), 0, 'the tensor was F32');
    seek $fh, $at, 0;
    print $fh pack('V', 16);
    close $fh or die "iq2: $!";
}

$info = `'$cli' info $dir/iq2.gguf 2>&1`;
like($info, qr/blk\.0\.attn_q\.weight\s+IQ2_XXS .*\(cannot compute\)/,
     'info marks the IQ2_XXS tensor');
like($info, qr/not computable \(kvserve computes with F32, .*Q4_K.*\)\n\s+blk\.0\.attn_q\.weight\s+IQ2_XXS/,
     '... and lists it');
like($info, qr/not a servable model: tensor "blk\.0\.attn_q\.weight" is of type IQ2_XXS/,
     '... and says the model cannot be served');
my $json = JSON::PP::decode_json(scalar `'$cli' info --json $dir/iq2.gguf`);
is_deeply($json->{not_computable},
          [{ name => 'blk.0.attn_q.weight', type => 'IQ2_XXS' }],
          'info --json lists it in not_computable');

my $refusal = qr/kvserve_model "bad": "\S+iq2\.gguf": tensor "blk\.0\.attn_q\.weight" is of type IQ2_XXS, which kvserve cannot compute with \(supported: F32, F16, BF16, \S.*IQ4_XS\)/;
my ($failed, $out) = $t->nginx_t("kvserve_model bad $dir/iq2.gguf;");
ok($failed, 'nginx -t refuses the IQ2_XXS model');
like($out, $refusal, '... naming the model, the tensor and its type');

my $models = join '', map { "    kvserve_model $_ $dir/$_.gguf;\n" }
                      @mixes, 'tiny-q4_k_m';
my $conf = <<"EOC";
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
EOC

# a real start with it fails before any engine exists
$t->write_conf($models . "    kvserve_model bad $dir/iq2.gguf;\n" . $conf);
$out = `$t->{nginx} -p $root/ -c $root/conf/nginx.conf -e logs/error.log 2>&1`;
isnt($? >> 8, 0, 'nginx does not start with it');
like($out . do { local $/; open my $fh, '<', $t->log_path; <$fh> // '' },
     $refusal, '... saying why');
ok(!$t->master_pid, '... no master');
ok(!$t->lease_pid,
   '... and no engine was started');

# the quantized models serve
$t->write_conf($models . $conf);
ok($t->start, 'nginx started with the quantized models');

for my $m (@mixes, 'tiny-q4_k_m') {
    my $r = $t->read_all($t->request('POST', '/v1/chat/completions',
        qq({"model": "$m", "max_tokens": 8, "temperature": 0, )
        . qq("messages": [{"role": "user", "content": "Hello there"}]})),
        60);
    my ($head, $body) = $t->split_response($r);
    like($head, qr{^HTTP/1\.1 200}, "$m: 200") or diag($r);
    my $j = eval { JSON::PP::decode_json($body) } || {};
    my $text = $j->{choices}[0]{message}{content};
    ok(defined $text && length $text, "$m: text");
    ok(($j->{usage}{prompt_tokens} // 0) > 0
       && ($j->{usage}{completion_tokens} // 0) > 0, "$m: usage")
        or diag($body);
}

# memory truth: /v1/models tells each model's weights as the engine's
# CPU backend holds them, the very figures kvserve info --json computes
# for the file, and the K/V element the engine caches; the engine's log
# says them at startup
my %want;
for my $m (@mixes, 'tiny-q4_k_m') {
    my $path = $m eq 'tiny-q4_k_m' ? "$dir/tiny-q4_k_m.gguf"
                                   : "$dir/$m.gguf";
    my $i = JSON::PP::decode_json(scalar `'$cli' info --json $path`);
    $want{$m} = $i->{memory}{backends}{cpu};
    ok($want{$m}{weights_mapped} > 0
       && $want{$m}{weights_mapped} <= $i->{file_size},
       "$m: info says the CPU maps weights, no more than the file")
        or diag(JSON::PP::encode_json($i->{memory}));
}
my $listed = {};
# a worker shows them once it has the engine's HELLO
$t->wait_for(sub {
    my (undef, $body) = $t->split_response($t->read_all(
        $t->request('GET', '/v1/models'), 10));
    my $j = eval { JSON::PP::decode_json($body) } || {};
    $listed = { map { ($_->{id} => $_->{kvserve}) } @{$j->{data} || []} };
    return !grep { !$listed->{$_} || !$listed->{$_}{weights} } keys %want;
}, 20);
for my $m (@mixes, 'tiny-q4_k_m') {
    my $k = $listed->{$m} || {};
    is_deeply($k->{weights},
              { backend => 'cpu',
                mapped_bytes => $want{$m}{weights_mapped},
                owned_bytes => $want{$m}{weights_owned},
                device_bytes => 0 },
              "$m: /v1/models' weights are kvserve info's CPU figures")
        or diag(JSON::PP::encode_json($k));
    is($k->{kv_dtype}, 'f32', "$m: kv_dtype f32");
    is($k->{kv_bytes_per_token}, $want{$m}{kv_bytes_per_token},
       "$m: kv_bytes_per_token as info says for the CPU");
    is($t->log_count(qr/model "$m": weights on cpu: $want{$m}{weights_mapped} bytes mapped, $want{$m}{weights_owned} owned, 0 on the device; KV f32, $want{$m}{kv_bytes_per_token} bytes per token/),
       1, "$m: the engine logged them once");
}

is($t->log_count(qr/\[alert\]|engine lost|connection lost/), 0,
   'no engine failed or was lost meanwhile');

done_testing();
