# kvserve_max_messages (issue 18, hole 4): a chat request with more
# messages than the location's cap is answered 400 "array too long"
# naming messages, before anything is rendered; one at the cap is served;
# the default (2048) holds where nothing is set; nginx -t refuses a bad
# value naming it.  Chat handling is linear in the messages since the
# span clipping fix; that is measured, not timed here
# (t/bench/chat_messages.sh, docs/performance.md).
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Socket::INET ();
use JSON::PP ();

my $t = Kvserve::Live->new('026-max-messages');
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_max_messages 5;
EOC
    server => <<"EOS");
        client_max_body_size 4m;
        location /v1/ { kvserve; }
        location /three/v1/ { kvserve; kvserve_max_messages 3; }
        location /default/v1/ { kvserve; kvserve_max_messages 2048; }
EOS

# n alternating user/assistant messages ending with a user's
sub chat {
    my ($n) = @_;
    my @m = map { { role => ($n - $_) % 2 ? 'assistant' : 'user',
                    content => "m$_" } } 1 .. $n;
    return JSON::PP->new->canonical->encode({ model => 'kvserve-tiny',
        messages => \@m, max_tokens => 2 });
}

sub post {
    my ($path, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
        or die "connect: $!";
    print $s "POST $path HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Type: application/json\r\n"
        . 'Content-Length: ' . length($body) . "\r\n"
        . "Connection: close\r\n\r\n$body";
    my ($head, $b) = $t->split_response($t->read_all($s, 30));
    my ($status) = ($head // '') =~ m{^HTTP/1\.1 (\d+)};
    my $json = eval { JSON::PP->new->decode($b // '') };
    return ($status // 0, $json, $b // '');
}

ok($t->start, 'nginx started');

my ($st, $j, $raw) = post('/three/v1/chat/completions', chat(3));
is($st, 200, '3 messages under a cap of 3: served') or diag($raw);
is($j->{object}, 'chat.completion', '... as a chat completion');

($st, $j, $raw) = post('/three/v1/chat/completions', chat(4));
is($st, 400, '4 messages under a cap of 3: 400') or diag($raw);
is($j->{error}{param}, 'messages', '... naming messages');
is($j->{error}{code}, 'array_above_max_length', '... OpenAI\'s code');
is($j->{error}{type}, 'invalid_request_error', '... and type');
like($j->{error}{message}, qr/maximum length 3, but got an array with length 4/,
     '... with both numbers');

($st, $j, $raw) = post('/v1/chat/completions', chat(6));
is($st, 400, 'the http block\'s cap of 5 applies where the location sets none')
    or diag($raw);
like($j->{error}{message}, qr/maximum length 5, but got .* length 6 /,
     '... with its numbers');

($st, $j, $raw) = post('/v1/chat/completions', chat(5));
is($st, 200, '... and 5 pass') or diag($raw);

# a cheap way past the cap would be many messages refused for another
# reason later: the cap answers first, even for a body the context check
# would refuse too (2049 messages of 2 tokens each are over 512 tokens)
($st, $j, $raw) = post('/default/v1/chat/completions', chat(2049));
is($st, 400, '2049 messages against 2048: 400') or diag(substr $raw, 0, 300);
is($j->{error}{code}, 'array_above_max_length',
   '... refused by the cap, not by the context');

($st, $j, $raw) = post('/default/v1/chat/completions', chat(2048));
is($st, 400, '2048 messages go on to the context check');
is($j->{error}{code}, 'context_length_exceeded', '... which refuses them');

# completions have no messages: the cap does not apply to prompts
($st, $j, $raw) = post('/three/v1/completions',
    '{"model": "kvserve-tiny", "prompt": ["a", "b", "c", "d"], '
    . '"max_tokens": 2}');
is($st, 200, 'a completions request with 4 prompts is not capped by it')
    or diag($raw);

my ($fail, $out) = $t->nginx_t("kvserve_max_messages 0;");
ok($fail, 'kvserve_max_messages 0 fails nginx -t');
like($out, qr/invalid value "0" in "kvserve_max_messages" directive, it must be a number from 1 to 1000000/,
     '... naming the value and the range');

($fail, $out) = $t->nginx_t("kvserve_max_messages many;");
ok($fail, 'a word fails nginx -t');
like($out, qr/invalid value "many" in "kvserve_max_messages"/, '... naming it');

($fail, $out) = $t->nginx_t("kvserve_max_messages 10; kvserve_max_messages 20;");
ok($fail, 'a duplicate fails nginx -t');
like($out, qr/"kvserve_max_messages" directive is duplicate/, '... saying so');

done_testing();
