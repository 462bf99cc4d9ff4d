# `nginx -t` with the module: a good configuration passes; a bad model path,
# a file that is not GGUF, a truncated GGUF and a tokenizer we cannot load
# fail with a message that names the directive, the file and the problem,
# and a non-zero status.
# (001-models.t checks the same errors on a real start, through must_die.)
use strict;
use warnings;
use File::Path qw(make_path remove_tree);
use Test::More;

my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
my $module = $ENV{TEST_NGINX_LOAD_MODULES}
    or plan skip_all => 'TEST_NGINX_LOAD_MODULES (the module .so) is not set';
my $model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
-f $model or plan skip_all => "no model at $model (run make all)";

my $root = ($ENV{TEST_NGINX_SERVROOT} || 't/servroot') . '-nginx-t';
remove_tree($root);
make_path("$root/conf", "$root/logs");

sub write_file {
    my ($path, $data) = @_;
    open my $fh, '>:raw', $path or die "$path: $!";
    print $fh $data;
    close $fh;
}

# Runs nginx -t on a config whose http block holds $http; returns
# (exit status, everything nginx printed).
sub nginx_t {
    my ($http) = @_;
    write_file("$root/conf/nginx.conf", <<"CONF");
load_module $module;
pid logs/nginx.pid;
error_log logs/error.log;
events { worker_connections 16; }
http {
    access_log logs/access.log;
    client_body_temp_path logs/cb; proxy_temp_path logs/p;
    fastcgi_temp_path logs/f; uwsgi_temp_path logs/u; scgi_temp_path logs/s;
    $http
    server { listen 127.0.0.1:1; location /v1/ { kvserve; } }
}
CONF
    my $out = `$nginx -t -p $root/ -c conf/nginx.conf -e logs/error.log 2>&1`;
    my $status = $? >> 8;
    my $log = do { local $/; open my $fh, '<', "$root/logs/error.log"; <$fh> };
    unlink "$root/logs/error.log";
    return ($status, $out . ($log // ''));
}

my ($status, $out) = nginx_t("kvserve_model tiny $model;");
is($status, 0, 'a valid model passes nginx -t') or diag($out);
like($out, qr/test is successful/, '... and nginx says so');

($status, $out) = nginx_t('kvserve_model tiny /no/such/model.gguf;');
isnt($status, 0, 'a missing model file fails nginx -t');
like($out, qr/\[emerg\] .*kvserve_model "tiny": cannot open "\/no\/such\/model\.gguf": No such file or directory in \S+nginx\.conf:\d+/,
     '... naming the directive, the file and the reason, with the line');
like($out, qr/test failed/, '... and nginx says the test failed');

write_file("$root/conf/notgguf.bin", "PK\x03\x04 this is a zip, not a model\n");
($status, $out) = nginx_t("kvserve_model zip $root/conf/notgguf.bin;");
isnt($status, 0, 'a file that is not GGUF fails nginx -t');
like($out, qr/kvserve_model "zip": "\S+notgguf\.bin": not a GGUF file: bad magic at byte 0/,
     '... saying it is not GGUF');

# the real model cut short in the middle of its metadata
open my $in, '<:raw', $model or die $!;
read $in, my $head, 300;
close $in;
write_file("$root/conf/truncated.gguf", $head);
($status, $out) = nginx_t("kvserve_model cut $root/conf/truncated.gguf;");
isnt($status, 0, 'a truncated GGUF fails nginx -t');
like($out, qr/kvserve_model "cut": "\S+truncated\.gguf": (truncated|corrupt): .* at byte \d+/,
     '... naming the field and the byte offset');

# a model whose tokenizer names a pre-tokenizer we do not implement
open $in, '<:raw', $model or die $!;
my $bytes = do { local $/; <$in> };
close $in;
$bytes =~ s/llama-bpe/llama-xyz/ or die "no tokenizer.ggml.pre in $model";
write_file("$root/conf/badpre.gguf", $bytes);
($status, $out) = nginx_t("kvserve_model badpre $root/conf/badpre.gguf;");
isnt($status, 0, 'an unknown pre-tokenizer fails nginx -t');
like($out, qr/kvserve_model "badpre": "\S+badpre\.gguf": tokenizer: tokenizer\.ggml\.pre: .*"llama-xyz"/,
     '... quoting the name it does not know');

remove_tree($root);
done_testing();
