# Long prompts are rendered and tokenized in an nginx thread pool
# (kvserve_tokenize_threads, kvserve_tokenize_threshold), short ones on
# the event loop; $kvserve_tokenize_where says which (an X-Where header
# here).  A prompt tokenized in the pool gets exactly the answer it gets
# inline (greedy, on the tiny model and on stories260K when the fixtures
# are there; chat and completions); a 100 KB prompt goes through the pool
# at the default threshold and is refused as over the context as inline
# (`kvserve tokenize --bos` confirms it is, when the tool is built); a
# client that leaves while its prompt is tokenized is dropped without
# harm and the next request is served; bad directive values fail
# `nginx -t` quoting the value.
use Test::Nginx::Socket 'no_plan';
use FindBin;
use lib "$FindBin::Bin/lib";
use IO::Socket::INET ();
use JSON::PP ();
use Time::HiRes qw(sleep);
use Kvserve::NginxT qw(write_file);

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
our $Fixtures = $ENV{KVS_FIXTURES} || "$FindBin::Bin/../../shared/fixtures";
our $Stories = "$Fixtures/models/stories260K-f32.gguf";
our $HaveStories = -f $Stories;

# /pool/: the kvs pool over 256 bytes; /inline/: no pool; /v1/: the
# defaults (nginx's "default" pool over 16k)
our $Where = 'add_header X-Where $kvserve_tokenize_where always;';

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value('main_config', 'thread_pool kvs threads=2;')
        unless defined $block->main_config;
    $block->set_value('http_config',
        "kvserve_model kvserve-tiny $Model;\n"
        . ($HaveStories ? "    kvserve_model stories260K $Stories;\n" : '')
        . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;\n"
        # the inline and pool answers are compared whole: the second
        # must not differ by reusing the first's prompt
        . "    kvserve_prefix_cache off;\n"
        . "    client_max_body_size 32m;")
        unless defined $block->http_config;
    $block->set_value('config',
        "location /pool/v1/ { kvserve; kvserve_tokenize_threads kvs;\n"
        . "    kvserve_tokenize_threshold 256; $Where }\n"
        . "location /inline/v1/ { kvserve; kvserve_tokenize_threads off;\n"
        . "    $Where }\n"
        . "location /v1/ { kvserve; $Where }")
        unless defined $block->config;
});

run_tests();

# --- on the nginx of the last block ------------------------------------------

my $port = $Test::Nginx::Util::ServerPortForClient;
my $json = JSON::PP->new->canonical;

# (status, headers, body) of a whole response
sub post {
    my ($uri, $body, $close_after) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 30)
        or die "connect: $!";
    $body = $json->encode($body) if ref $body;
    my $req = "POST $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Type: application/json\r\n"
        . "Content-Length: " . length($body) . "\r\n\r\n$body";
    my $off = 0;
    while ($off < length $req) {
        my $n = syswrite($s, $req, 1 << 20, $off);
        die "write: $!" unless defined $n;
        $off += $n;
    }
    if (defined $close_after) {
        sleep $close_after if $close_after > 0;
        close $s;
        return;
    }
    local $/;
    my $r = <$s> // '';
    close $s;
    my ($head, $rest) = split /\r\n\r\n/, $r, 2;
    my ($status) = ($head // '') =~ /^HTTP\/1\.1 (\d+)/;
    return ($status // 0, $head // '', $rest // '');
}

sub where {
    my $head = shift;
    my ($w) = $head =~ /^X-Where: (\S+)/mi;
    return $w // '';
}

# the parts of an answer that do not change between two runs
sub answer {
    my $body = shift;
    my $d = eval { $json->decode($body) } or return "not JSON: $body";
    return $json->encode({ choices => $d->{choices}, usage => $d->{usage} });
}

# a deterministic English-like text of about $bytes bytes
sub text {
    my ($bytes, $seed) = @_;
    my @w = qw(once upon a time there was a little girl named lily she
               liked to play in the park with her dog the sun was warm and
               happy one day they found a big red ball under a tree);
    my ($t, $i) = ('', $seed // 0);
    while (length $t < $bytes) {
        $t .= $w[($i * 7 + 3) % @w] . ' ';
        $i++;
    }
    return substr $t, 0, $bytes;
}

for my $model ('kvserve-tiny', 'stories260K') {
  SKIP: {
    # the eleven checks below, skipped without the fixture
    Test::More::skip("$model: needs $Stories", 11)
        if $model eq 'stories260K' && !$HaveStories;

    # 600 bytes: over /pool/'s threshold, within the context of both
    my $prompt = text(600, 1);

    my %got;
    for my $loc (qw(pool inline)) {
        my ($st, $head, $body) = post("/$loc/v1/completions", {
            model => $model, prompt => $prompt, max_tokens => 16,
            temperature => 0 });
        is($st, 200, "$model: completions via /$loc/: 200") or diag($body);
        is(where($head), $loc, "... tokenized $loc");
        $got{$loc} = answer($body);
    }
    is($got{pool}, $got{inline},
       "$model: the same greedy completion and usage from the pool");
    like($got{pool}, qr/"prompt_tokens":[1-9]\d*/, '... with prompt tokens');

    %got = ();
    for my $loc (qw(pool inline)) {
        my ($st, $head, $body) = post("/$loc/v1/chat/completions", {
            model => $model,
            messages => [ { role => 'system', content => text(200, 2) },
                          { role => 'user', content => text(300, 3) } ],
            max_tokens => 12, temperature => 0 });
        if ($model eq 'stories260K') {
            # no chat template in that model: the same refusal either way
            is($st, 400, "$model: chat via /$loc/ is refused (no template)");
        } else {
            is($st, 200, "$model: chat via /$loc/: 200") or diag($body);
        }
        is(where($head), $st == 200 ? $loc : '-',
           "... " . ($st == 200 ? "rendered and tokenized $loc"
                                : 'not tokenized'));
        $got{$loc} = $st == 200 ? answer($body) : $body;
    }
    is($got{pool}, $got{inline}, "$model: the same chat answer from the pool");
  }
}

# a short prompt stays on the event loop, even where a pool is set
{
    my ($st, $head) = post('/pool/v1/completions', {
        model => 'kvserve-tiny', prompt => text(200), max_tokens => 2 });
    is($st, 200, 'a 200-byte prompt under /pool/: 200');
    is(where($head), 'inline', '... tokenized inline (threshold 256)');

    # token ids need no tokenizing
    ($st, $head) = post('/pool/v1/completions', {
        model => 'kvserve-tiny', prompt => [ (5) x 300 ], max_tokens => 2 });
    is($st, 200, 'a prompt of 300 token ids: 200');
    is(where($head), 'inline', '... not sent to the pool');
}

# 100 KB: over the default threshold (16k), over the context: the same
# refusal from the default pool and inline, once the first 513 tokens
# are there (the rest is not tokenized), and the tool, which counts all
# of it, agrees that it is over the context
{
    my $big = text(100 * 1024, 4);
    my %msg;
    for my $loc ('', '/inline') {
        my ($st, $head, $body) = post("$loc/v1/completions", {
            model => 'kvserve-tiny', prompt => $big, max_tokens => 4 });
        my $name = $loc || '/v1 (defaults)';
        is($st, 400, "100 KB prompt via $name: 400") or diag($body);
        like($body, qr/"code":"context_length_exceeded"/,
             '... context_length_exceeded');
        like($body, qr/your prompt resulted in more than 512 tokens/,
             '... longer than the context of 512 tokens');
        is(where($head), $loc ? 'inline' : 'pool',
           '... tokenized ' . ($loc ? 'inline' : 'in the default pool'));
        $msg{$name} = $body;
    }
    is($msg{'/v1 (defaults)'}, $msg{'/inline'},
       '... in the pool as inline');

    # the tool next to the models' directory (make's build dir), if built
    my $tool = "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
    if (-x $tool) {
        my $in = "$Test::Nginx::Util::LogDir/big.txt";
        write_file($in, $big);
        my @ids = split ' ', `$tool tokenize --bos $Model < $in`;
        unlink $in;
        ok(@ids > 512, '... and `kvserve tokenize --bos` counts '
           . scalar(@ids) . ' tokens, over 512');
    }
}

# a client that leaves while its prompt is tokenized: at once (its FIN
# comes with the body) and a little later (nginx sees it mid-task); the
# worker drops the request when the task is back, and serves the next
{
    my $huge = $json->encode({ model => 'kvserve-tiny',
                               prompt => text(12 << 20, 5),
                               max_tokens => 1 });
    my $log = $Test::Nginx::Util::ErrLogFile;
    my $before = () = do {
        open my $fh, '<', $log or die "$log: $!";
        grep { /the client left while its prompt was tokenized/ } <$fh>;
    };

    post('/pool/v1/completions', $huge, 0);
    post('/pool/v1/completions', $huge, 0.02);

    my ($dropped, @bad) = (0);
    for (1 .. 100) {
        open my $fh, '<', $log or die "$log: $!";
        my @lines = <$fh>;
        $dropped = grep { /the client left while its prompt was tokenized/ }
                   @lines;
        @bad = grep { /\[(alert|crit|emerg)\]|exited on signal/ } @lines;
        last if $dropped - $before >= 2;
        sleep 0.1;
    }
    is($dropped - $before, 2, 'two clients left mid-tokenizing: both '
       . 'requests dropped when their task was back');
    is(scalar @bad, 0, '... with no alert or crash') or diag(@bad);

    my ($st, $head, $body) = post('/pool/v1/completions', {
        model => 'kvserve-tiny', prompt => text(600, 6), max_tokens => 2 });
    is($st, 200, '... and the next request through the pool is served')
        or diag($body);
    is(where($head), 'pool', '... in the pool');
}

# bad values fail nginx -t, quoting them
if ($ENV{TEST_NGINX_LOAD_MODULES}) {
    my $t = Kvserve::NginxT->new('tokenize-pool');
    my $m = "kvserve_model tiny $Model;";

    my ($status, $out) = $t->nginx_t("$m kvserve_tokenize_threads default; "
                                      . "kvserve_tokenize_threshold 64k;");
    is($status, 0, 'nginx -t: the default pool and a threshold pass')
        or diag($out);

    ($status, $out) = $t->nginx_t("$m kvserve_tokenize_threshold 16q;");
    isnt($status, 0, 'nginx -t: a bad threshold fails');
    like($out, qr/invalid value "16q" in "kvserve_tokenize_threshold" directive, it must be a size/,
         '... quoting it');

    ($status, $out) = $t->nginx_t("$m kvserve_tokenize_threshold -1;");
    like($out, qr/invalid value "-1" in "kvserve_tokenize_threshold"/,
         'nginx -t: a negative threshold fails, quoted');

    ($status, $out) = $t->nginx_t("$m kvserve_tokenize_threads nope;");
    isnt($status, 0, 'nginx -t: an undeclared thread pool fails');
    like($out, qr/unknown thread pool "nope" in \S+nginx\.conf:\d+/,
         '... quoting its name, with the line');

    ($status, $out) = $t->nginx_t("$m kvserve_tokenize_threads \"\";");
    like($out, qr/invalid value "" in "kvserve_tokenize_threads" directive/,
         'nginx -t: an empty pool name fails, quoted');

    ($status, $out) = $t->nginx_t("$m kvserve_tokenize_threads off; "
                                  . "kvserve_tokenize_threads kvs;");
    like($out, qr/"kvserve_tokenize_threads" directive is duplicate/,
         'nginx -t: a second kvserve_tokenize_threads fails');
    $t->done;
}

__DATA__

=== TEST 1: a completion carries $kvserve_tokenize_where; a short prompt is tokenized inline
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "Once upon a time", "max_tokens": 2}
--- response_headers
X-Where: inline
--- error_code: 200

=== TEST 2: not a completion: $kvserve_tokenize_where is "-"
--- request
GET /v1/models
--- response_headers
X-Where: -
--- error_code: 200

=== TEST 3: over the threshold: the pool
--- request eval
"POST /pool/v1/completions\n"
. '{"model": "kvserve-tiny", "max_tokens": 2, "prompt": "'
. ('lily and her dog ' x 20) . '"}'
--- response_headers
X-Where: pool
--- error_code: 200
--- error_log
kvserve: tokenized 340 bytes in the thread pool
