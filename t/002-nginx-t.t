# `nginx -t` with the module: a good configuration passes; a bad model path,
# a file that is not GGUF, a truncated GGUF and a tokenizer we cannot load
# fail with a message that names the directive, the file and the problem,
# and a non-zero status.
# (001-models.t checks the same errors on a real start, through must_die.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::NginxT qw(write_file);
use Test::More;

my $t = Kvserve::NginxT->new('nginx-t');
my $model = $t->model;
my $root = $t->root;

my ($status, $out) = $t->nginx_t("kvserve_model tiny $model;");
is($status, 0, 'a valid model passes nginx -t') or diag($out);
like($out, qr/test is successful/, '... and nginx says so');

($status, $out) = $t->nginx_t('kvserve_model tiny /no/such/model.gguf;');
isnt($status, 0, 'a missing model file fails nginx -t');
like($out, qr/\[emerg\] .*kvserve_model "tiny": cannot open "\/no\/such\/model\.gguf": No such file or directory in \S+nginx\.conf:\d+/,
     '... naming the directive, the file and the reason, with the line');
like($out, qr/test failed/, '... and nginx says the test failed');

write_file("$root/conf/notgguf.bin", "PK\x03\x04 this is a zip, not a model\n");
($status, $out) = $t->nginx_t("kvserve_model zip $root/conf/notgguf.bin;");
isnt($status, 0, 'a file that is not GGUF fails nginx -t');
like($out, qr/kvserve_model "zip": "\S+notgguf\.bin": not a GGUF file: bad magic at byte 0/,
     '... saying it is not GGUF');

# the real model cut short in the middle of its metadata
open my $in, '<:raw', $model or die $!;
read $in, my $head, 300;
close $in;
write_file("$root/conf/truncated.gguf", $head);
($status, $out) = $t->nginx_t("kvserve_model cut $root/conf/truncated.gguf;");
isnt($status, 0, 'a truncated GGUF fails nginx -t');
like($out, qr/kvserve_model "cut": "\S+truncated\.gguf": (truncated|corrupt): .* at byte \d+/,
     '... naming the field and the byte offset');

# a model whose tokenizer names a pre-tokenizer we do not implement
open $in, '<:raw', $model or die $!;
my $bytes = do { local $/; <$in> };
close $in;
$bytes =~ s/llama-bpe/llama-xyz/ or die "no tokenizer.ggml.pre in $model";
write_file("$root/conf/badpre.gguf", $bytes);
($status, $out) = $t->nginx_t("kvserve_model badpre $root/conf/badpre.gguf;");
isnt($status, 0, 'an unknown pre-tokenizer fails nginx -t');
like($out, qr/kvserve_model "badpre": "\S+badpre\.gguf": tokenizer: unknown pre-tokenizer "llama-xyz" \(tokenizer\.ggml\.pre\); known: /,
     '... quoting the name it does not know');

$t->done;
done_testing();
