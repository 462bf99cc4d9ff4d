# Model architectures through nginx (issue 20): a file of each
# architecture `kvserve gen-model --arch` writes (llama, qwen3 with heads
# wider than embd / heads, phi3, gemma2 and gemma3 with sliding windows
# shorter than the conversation) serves a chat completion, and a qwen3 file missing one
# per-head norm, or a phi3 file without its sliding_window key, is
# refused by nginx -t naming the tensor or key, so no engine is started
# for it.
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

my $t = Kvserve::Live->new('029', 'models');
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

my $shape = '--layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96'
            . ' --vocab 512 --ctx 512';
my %gen = (
    llama => "--arch llama $shape",
    qwen3 => "--arch qwen3 $shape --head-dim 32",
    phi3  => "--arch phi3 $shape --swa 16",
    gemma2 => "--arch gemma2 $shape --swa 16",
    gemma3 => "--arch gemma3 $shape --swa 16 --layers 6",
);
for my $a (sort keys %gen) {
    cli_ok("gen-model --arch $a", "gen-model $gen{$a} --seed 20"
           . " --name arch-$a $dir/$a.gguf");
    like(scalar `'$cli' info $dir/$a.gguf 2>&1`,
         qr/general\.architecture\s+str\s+"$a"/, "info: $a");
}

# a file with one tensor renamed (same length: the header stays valid)
# or one key renamed, by editing its bytes
sub rename_in {
    my ($src, $dst, $from, $to) = @_;
    open my $in, '<:raw', $src or die "$src: $!";
    my $bytes = do { local $/; <$in> };
    close $in;
    my $at = index($bytes, $from);
    die "no $from in $src" if $at < 0 || length $from != length $to;
    substr($bytes, $at, length $from) = $to;
    open my $out, '>:raw', $dst or die "$dst: $!";
    print $out $bytes;
    close $out or die "$dst: $!";
}

rename_in("$dir/qwen3.gguf", "$dir/qwen3-bad.gguf",
          'blk.1.attn_k_norm.weight', 'blk.1.attn_k_norm.weighx');
my ($failed, $out) = $t->nginx_t(
    "kvserve_model bad $dir/qwen3-bad.gguf;");
ok($failed, 'nginx -t refuses a qwen3 file without a K norm');
like($out, qr/kvserve_model "bad": .*missing tensor 'blk\.1\.attn_k_norm\.weight'/,
     '... naming the tensor') or diag($out);

rename_in("$dir/phi3.gguf", "$dir/phi3-bad.gguf",
          'phi3.attention.sliding_window', 'phi3.attention.sliding_windox');
($failed, $out) = $t->nginx_t("kvserve_model bad $dir/phi3-bad.gguf;");
ok($failed, 'nginx -t refuses a phi3 file without its window');
like($out, qr/kvserve_model "bad": .*missing required key 'phi3\.attention\.sliding_window'/,
     '... naming the key') or diag($out);

my $models = join '', map { "    kvserve_model $_ $dir/$_.gguf;\n" }
                      sort keys %gen;
$t->write_conf($models . <<"EOC");
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
EOC
ok($t->start, 'nginx started with the five architectures');

# a prompt longer than phi3's window of 16, so its decode steps attend
# a window that slides
my $long = join ' ', ('the quick brown fox jumps over the lazy dog') x 4;
for my $a (sort keys %gen) {
    my $r = $t->read_all($t->request('POST', '/v1/chat/completions',
        qq({"model": "$a", "max_tokens": 12, "temperature": 0, )
        . qq("messages": [{"role": "user", "content": "$long"}]})), 60);
    my ($head, $body) = $t->split_response($r);
    like($head, qr{^HTTP/1\.1 200}, "$a: 200") or diag($r);
    my $j = eval { JSON::PP::decode_json($body) } || {};
    my $text = $j->{choices}[0]{message}{content};
    ok(defined $text && length $text, "$a: text");
    ok(($j->{usage}{prompt_tokens} // 0) > 16
       && ($j->{usage}{completion_tokens} // 0) > 0, "$a: usage")
        or diag($body);
}

is($t->log_count(qr/\[alert\]|engine lost|connection lost/), 0,
   'no engine failed or was lost meanwhile');

done_testing();
