# kvserve_guard (issue 23, point 3): nginx -t refuses an unbounded
# pattern, one longer than the hold-back and one that does not compile,
# naming file and line; input=reject answers 400 with the rule's class
# as the code and neither pattern nor text; output=stop and =redact on a
# match that spans two tokens (two SSE events).  The tiny model's output
# is made known first: greedy (temperature 0) from an unguarded run, a
# pattern built from the end of one token and the start of the next,
# then nginx started again with it.  Also the size caps, $kvserve_guard
# in the access log, and kvserve_guard_matches_total.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Socket::INET ();
use JSON::PP ();
use Encode ();

my $t = Kvserve::Live->new('037-guard');
my $port = $t->port;
my $root = $t->root;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

sub write_file {
    my ($path, $text) = @_;
    open my $fh, '>:raw', $path or die "$path: $!";
    print $fh $text;
    close $fh or die "$path: $!";
}

# ---- nginx -t ------------------------------------------------------------

write_file("$root/conf/unb.rules", "# ok\npii \\d{3}\nsecret key=.*\n");
my ($failed, $out) = $t->nginx_t(
    "kvserve_guard_zone g patterns=$root/conf/unb.rules;");
ok($failed, 'an unbounded pattern fails nginx -t');
like($out, qr/kvserve_guard_zone "g": \S+unb\.rules:3: the match length is unbounded \(the quantifier at offset 5\)/,
     '... naming file, line and where');

write_file("$root/conf/long.rules", "pii x{20000}\n");
($failed, $out) = $t->nginx_t(
    "kvserve_guard_zone g patterns=$root/conf/long.rules;");
ok($failed, 'a pattern longer than the hold-back fails nginx -t');
like($out, qr/long\.rules:1: a match may span 20000 bytes, over the 16384/,
     '... saying how long');

write_file("$root/conf/bad.rules", "pii a(b\n");
($failed, $out) = $t->nginx_t(
    "kvserve_guard_zone g patterns=$root/conf/bad.rules;");
ok($failed, 'a pattern that does not compile fails nginx -t');
like($out, qr/bad\.rules:1: the pattern does not compile: missing closing parenthesis at offset 3/,
     '... with PCRE2\'s message and offset');

write_file("$root/conf/win.rules", "secret window=64 key=.*\n");
($failed, $out) = $t->nginx_t(
    "kvserve_guard_zone g patterns=$root/conf/win.rules;\n"
    . "    server { location / { kvserve_guard zone=g output=fast; } }");
ok($failed, 'a bad output= fails nginx -t');
like($out, qr/invalid parameter "output=fast" in "kvserve_guard"/,
     '... naming the value');
($failed, $out) = $t->nginx_t(
    "kvserve_guard_zone g patterns=$root/conf/win.rules;");
ok(!$failed, 'an unbounded pattern with window= passes') or diag($out);
# a gateway would pass what it cannot prepare on unguarded: refused
($failed, $out) = $t->nginx_t(
    "kvserve_model kvserve-tiny $model;\n"
    . "    kvserve_guard_zone g patterns=$root/conf/win.rules;\n"
    . "    upstream b { kvserve_prefix_balance; server 127.0.0.1:1; }\n"
    . "    server { location /v1/ { kvserve_route redis=127.0.0.1:1;\n"
    . "        proxy_pass http://b; kvserve_guard zone=g output=stop; } }");
ok($failed, 'kvserve_guard in a kvserve_route location fails nginx -t');
like($out, qr/apply where kvserve serves, not in a kvserve_route location/,
     '... saying where it applies') or diag($out);

($failed, $out) = $t->nginx_t("kvserve_max_tokens 0;");
ok($failed, 'kvserve_max_tokens 0 fails nginx -t');
like($out, qr/invalid value "0" in "kvserve_max_tokens" directive, it must be a number from 1 to 2147483647/,
     '... naming the value');
($failed, $out) = $t->nginx_t("kvserve_max_prompt_tokens many;");
like($out, qr/invalid value "many" in "kvserve_max_prompt_tokens"/,
     'kvserve_max_prompt_tokens: a word fails, named');

# ---- the unguarded output, greedy ----------------------------------------

sub post {
    my ($path, $body, $more) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
        or die "connect: $!";
    print $s "POST $path HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Type: application/json\r\n" . ($more // '')
        . 'Content-Length: ' . length($body) . "\r\n"
        . "Connection: close\r\n\r\n$body";
    my ($head, $b) = $t->split_response($t->read_all($s, 30));
    my ($status) = ($head // '') =~ m{^HTTP/1\.1 (\d+)};
    return ($status // 0, $b // '');
}

sub get {
    my ($path) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
        or die "connect: $!";
    print $s "GET $path HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    my ($head, $b) = $t->split_response($t->read_all($s, 30));
    return $b // '';
}

my $json = JSON::PP->new->utf8->canonical;
my $ask = $json->encode({ model => 'kvserve-tiny', temperature => 0,
    messages => [ { role => 'user', content => 'tell me' } ],
    max_tokens => 16, stream => JSON::PP::true,
    stream_options => { include_usage => JSON::PP::true } });

# the content deltas, the finish reason and usage of an SSE body
sub events {
    my ($body) = @_;
    my (@d, $finish, $usage);
    for my $line (split /\n/, $body) {
        next unless $line =~ /^data: (\{.*)/;
        my $e = $json->decode($1);
        $usage = $e->{usage} if $e->{usage};
        my $c = $e->{choices}[0] or next;
        push @d, $c->{delta}{content}
            if defined $c->{delta}{content} && length $c->{delta}{content};
        $finish = $c->{finish_reason} if defined $c->{finish_reason};
    }
    return (\@d, $finish, $usage);
}

my $common = <<"EOC";
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
EOC

$t->write_conf($common);
ok($t->start, 'nginx started without a guard');
(my $lp = $ask) =~ s/"stream":true,/"logprobs":true,/;
$lp =~ s/,"stream_options":\{"include_usage":true\}//;
my ($st, $body) = post('/v1/chat/completions', $lp);
is($st, 200, 'the greedy output, with its tokens') or diag($body);
my $d = [ map { $_->{token} }
          @{ (eval { $json->decode($body) } || {})->{choices}[0]{logprobs}
               {content} // [] } ];
$t->stop;

# two neighbouring tokens with ASCII letters or digits where they meet
my $k;
for my $i (0 .. $#$d - 1) {
    if ($d->[$i] =~ /[A-Za-z0-9]$/ && $d->[$i + 1] =~ /^[A-Za-z0-9]/) {
        $k = $i;
        last;
    }
}
$k //= 0;
ok(@$d >= 2, 'the output has two tokens or more') or diag(explain($d));
my $whole = join '', @$d[0 .. $#$d];
my $a_end = substr($d->[$k], -1);
my $b_beg = substr($d->[$k + 1], 0, 1);
my $span = $a_end . $b_beg;
my $pat = join '', map { sprintf '\x{%x}', ord } split //, $span;
my $before = substr($whole, 0, index($whole, $span));
(my $redacted = $whole) =~ s/\Q$span\E/[redacted]/g;
note(Encode::encode_utf8("tokens: " . join('|', @$d) . "; pattern $pat"));

write_file("$root/conf/guard.rules", Encode::encode_utf8(
    "# the test's rules\npii:ssn \\d{3}-\\d{2}-\\d{4}\nspan:two $pat\n"));

$t->write_conf($common . <<"EOC",
    kvserve_guard_zone g patterns=$root/conf/guard.rules;
    log_format guard '[\$kvserve_guard]';
    access_log $root/logs/access.log guard;
EOC
    access_log => '',
    server => <<"EOS");
        location /in/v1/ { kvserve; kvserve_guard zone=g input=reject; }
        location /stop/v1/ { kvserve; kvserve_guard zone=g output=stop; }
        location /redact/v1/ { kvserve; kvserve_guard zone=g output=redact; }
        location /caps/v1/ { kvserve; kvserve_max_prompt_tokens 30;
                             kvserve_max_tokens 4; }
        location /v1/ { kvserve; }
        location = /metrics { kvserve_metrics; }
EOS
ok($t->start, 'nginx started with the guard');

# ---- input ---------------------------------------------------------------

($st, $body) = post('/in/v1/chat/completions', $json->encode({
    model => 'kvserve-tiny', max_tokens => 2,
    messages => [ { role => 'user', content => 'my ssn is 123-45-6789' } ] }));
is($st, 400, 'input=reject: a prompt that matches is refused') or diag($body);
my $e = eval { $json->decode($body) } || {};
is($e->{error}{code}, 'content_policy_pii', '... the code names the class');
is($e->{error}{type}, 'invalid_request_error', '... OpenAI\'s shape');
unlike($body, qr/123-45|\\d\{3\}/, '... echoing neither text nor pattern');

($st, $body) = post('/in/v1/completions', $json->encode({
    model => 'kvserve-tiny', max_tokens => 2, prompt => 'nothing here' }));
is($st, 200, 'input=reject: a prompt that does not match is served')
    or diag($body);

# ---- output: stop and redact across two tokens ---------------------------

($st, $body) = post('/stop/v1/chat/completions', $ask);
is($st, 200, 'output=stop: streamed') or diag($body);
my ($sd, $finish, $usage) = events($body);
is(join('', @$sd), $before, '... the text before the match, no more');
is($finish, 'content_filter', '... finish_reason content_filter');

# the same greedy text, asked for longer: the stop cancels the sequence
(my $long = $ask) =~ s/"max_tokens":16/"max_tokens":400/;
($st, $body) = post('/stop/v1/chat/completions', $long);
($sd, $finish, $usage) = events($body);
is($finish, 'content_filter', 'output=stop with max_tokens 400: stopped');
ok($usage && $usage->{completion_tokens} < 400,
   '... and the engine generated no more (cancelled)')
    or diag(explain($usage));

($st, $body) = post('/redact/v1/chat/completions', $ask);
is($st, 200, 'output=redact: streamed') or diag($body);
($sd, $finish) = events($body);
is(join('', @$sd), $redacted, '... the match replaced, the rest whole');
is($finish, 'length', '... and the generation went on to max_tokens');

(my $plain = $ask) =~ s/"stream":true,//;
$plain =~ s/,"stream_options":\{"include_usage":true\}//;
($st, $body) = post('/redact/v1/chat/completions', $plain);
$e = eval { $json->decode($body) } || {};
is($e->{choices}[0]{message}{content}, $redacted,
   'output=redact, not streaming: the same text') or diag($body);

($st, $body) = post('/stop/v1/chat/completions', $plain);
$e = eval { $json->decode($body) } || {};
is($e->{choices}[0]{finish_reason}, 'content_filter',
   'output=stop, not streaming: content_filter') or diag($body);
is($e->{choices}[0]{message}{content}, $before, '... the text before it');

# Anthropic's Messages route: the same prompt, so the same greedy text;
# the guard's stop is its stop_reason "refusal"
my $msg = $json->encode({ model => 'kvserve-tiny', temperature => 0,
    max_tokens => 16, messages => [ { role => 'user', content => 'tell me' } ] });
($st, $body) = post('/stop/v1/messages', $msg,
                    "anthropic-version: 2023-06-01\r\n");
$e = eval { $json->decode($body) } || {};
is($e->{stop_reason}, 'refusal', '/v1/messages, output=stop: refusal')
    or diag($body);
is(join('', map { $_->{text} // '' } @{ $e->{content} // [] }), $before,
   '... the text before the match');

# ---- caps ----------------------------------------------------------------

($st, $body) = post('/caps/v1/chat/completions', $json->encode({
    model => 'kvserve-tiny', max_tokens => 5,
    messages => [ { role => 'user', content => 'hi' } ] }));
$e = eval { $json->decode($body) } || {};
is($st, 400, 'kvserve_max_tokens: max_tokens over it is refused');
is($e->{error}{param}, 'max_tokens', '... naming the field');
like($e->{error}{message}, qr/max_tokens is 5, over the 4/,
     '... with both numbers');

($st, $body) = post('/caps/v1/chat/completions', $json->encode({
    model => 'kvserve-tiny', max_completion_tokens => 9,
    messages => [ { role => 'user', content => 'hi' } ] }));
$e = eval { $json->decode($body) } || {};
is($e->{error}{param}, 'max_completion_tokens',
   'max_completion_tokens over it: named as sent') or diag($body);

($st, $body) = post('/caps/v1/completions', $json->encode({
    model => 'kvserve-tiny', max_tokens => 2,
    prompt => join(' ', ('word') x 60) }));
$e = eval { $json->decode($body) } || {};
is($st, 400, 'kvserve_max_prompt_tokens: a longer prompt is refused');
is($e->{error}{param}, 'prompt', '... naming the field');
like($e->{error}{message}, qr/over the 30 this server allows/,
     '... and the cap');

($st, $body) = post('/caps/v1/chat/completions', $json->encode({
    model => 'kvserve-tiny', messages => [ { role => 'user',
    content => 'hi' } ] }));
$e = eval { $json->decode($body) } || {};
is($st, 200, 'chat without max_tokens: served') or diag($body);
ok($e->{usage}{completion_tokens} <= 4, '... within the cap')
    or diag($body);

($st, $body) = post('/caps/v1/completions', $json->encode({
    model => 'kvserve-tiny', prompt => 'hi', temperature => 0 }));
$e = eval { $json->decode($body) } || {};
is($st, 200, 'completions without max_tokens (default 16): served, not '
   . 'refused') or diag($body);
ok($e->{usage}{completion_tokens} <= 4, '... within the cap')
    or diag($body);

# the Messages route: the same refusals in Anthropic's error shape
my $av = "anthropic-version: 2023-06-01\r\n";
($st, $body) = post('/caps/v1/messages', $json->encode({
    model => 'kvserve-tiny', max_tokens => 5,
    messages => [ { role => 'user', content => 'hi' } ] }), $av);
$e = eval { $json->decode($body) } || {};
is($st, 400, '/v1/messages: max_tokens over kvserve_max_tokens refused')
    or diag($body);
is($e->{type}, 'error', '... in Anthropic\'s shape');
is($e->{error}{type}, 'invalid_request_error', '... invalid_request_error');
like($e->{error}{message}, qr/max_tokens/, '... naming the field');

($st, $body) = post('/in/v1/messages', $json->encode({
    model => 'kvserve-tiny', max_tokens => 2,
    messages => [ { role => 'user', content => 'my ssn is 123-45-6789' } ] }),
    $av);
$e = eval { $json->decode($body) } || {};
is($st, 400, '/v1/messages: input=reject refuses a matching prompt')
    or diag($body);
is($e->{error}{type}, 'invalid_request_error', '... Anthropic\'s shape');
unlike($body, qr/123-45|\\d\{3\}/, '... echoing neither text nor pattern');

# ---- the variable and the metric -----------------------------------------

my $metrics = get('/metrics');
like($metrics, qr/^kvserve_guard_matches_total\{zone="g",rule="pii:ssn",where="input",action="reject"\} 2$/m,
     'the input refusals are counted (chat, Messages)');
like($metrics, qr/^kvserve_guard_matches_total\{zone="g",rule="span:two",where="output",action="stop"\} 4$/m,
     'the four stops are counted (three chat, one Messages)');
like($metrics, qr/^kvserve_guard_matches_total\{zone="g",rule="span:two",where="output",action="redact"\} [1-9]/m,
     'the redactions are counted');

$t->stop;
open my $al, '<', "$root/logs/access.log" or die "access.log: $!";
my @lines = <$al>;
close $al;
ok((grep { /^\[input:pii\]$/ } @lines), '$kvserve_guard: input:pii');
ok((grep { /^\[output:span:stop\]$/ } @lines), '... output:span:stop');
ok((grep { /^\[output:span:redact\]$/ } @lines), '... output:span:redact');
ok((grep { /^\[\]$/ } @lines), '... empty where nothing fired');

done_testing();
