# Self-test of the test runner: uses stock nginx directives only, and must
# pass both under t/lib/Test/Nginx/Socket.pm and under the real Test::Nginx.
use Test::Nginx::Socket;

repeat_each(2);
no_shuffle();
workers(1);
env_to_nginx('TEST_NGINX_GREETING');

$ENV{TEST_NGINX_GREETING} = 'hi from the environment';

# Blocks that say nothing about the error log must leave no [error] in it.
add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->error_log && !defined $block->no_error_log) {
        $block->set_value('no_error_log', '[error]');
    }
});

plan tests => repeat_each() * (3 * blocks() + 15);

run_tests();

__DATA__

=== TEST 1: return, add_header, exact response_headers (and an absent one)
--- config
    location = /t {
        add_header X-Runner yes;
        return 200 "hello, runner\n";
    }
--- request
GET /t
--- response_headers
X-Runner: yes
Content-Type: text/plain
!X-Missing
--- response_body
hello, runner



=== TEST 2: $TEST_NGINX_* in config and expected body, $ServerPort in the body
--- config
    location = /env {
        return 200 "$TEST_NGINX_GREETING on $TEST_NGINX_SERVER_PORT\n";
    }
--- request
GET /env
--- response_body
$TEST_NGINX_GREETING on $ServerPort



=== TEST 3: user_files, and a chunked response (sub_filter drops Content-Length)
--- config
    location = /chunked.txt {
        sub_filter_types text/plain;
        sub_filter 'world' 'chunked world';
    }
--- user_files
>>> chunked.txt
hello, world
second line
--- request
GET /chunked.txt
--- raw_response_headers_like: Transfer-Encoding: chunked\r\n
--- raw_response_headers_unlike
Content-Length
--- response_body
hello, chunked world
second line



=== TEST 4: $TEST_NGINX_RAND_PORT_1 for a backend server, proxied to
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location / {
            return 200 "backend saw $uri\n";
        }
    }
--- config
    location /proxy/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_RAND_PORT_1/;
    }
--- request
GET /proxy/abc
--- response_body
backend saw /abc



=== TEST 5: more_headers, including Host
--- config
    location = /h {
        return 200 "host=$host foo=$http_x_foo\n";
    }
--- more_headers
Host: example.com
X-Foo: bar
--- request
GET /h
--- response_body
host=example.com foo=bar



=== TEST 6: request body gets a Content-Length
--- config
    location = /post {
        return 200 "$request_method $content_length\n";
    }
--- request
POST /post
hello world
--- response_body
POST 11



=== TEST 7: 405 for POST to a static file, error_code and response_body_like
--- config
--- request
POST /index.html
x
--- error_code: 405
--- response_body_like: 405 Not Allowed



=== TEST 8: 404 with error_log literals, no_error_log, grep_error_log
--- config
--- request
GET /missing.txt
--- error_code: 404
--- error_log
No such file or directory
/missing.txt" failed
--- no_error_log
[alert]
[crit]
--- grep_error_log eval: qr/open\(\) "[^"]+" failed/
--- grep_error_log_out
open() "$TEST_NGINX_SERVER_ROOT/html/missing.txt" failed



=== TEST 9: error_log as an eval array mixing qr// and literals, error_code_like
--- config
--- request
GET /nothing/here
--- error_code_like: ^4\d\d$
--- error_log eval
[qr/\[error\] .*open\(\) "[^"]+\/nothing\/here" failed/, "(2: No such file or directory)"]



=== TEST 10: response_headers_like (anchored) and response_body eval qr//
--- config
    location = /like {
        return 200 "hello, anchored world\n";
    }
--- request
GET /like
--- response_headers_like
Server: nginx(/\S+)?
Content-Length: \d+
--- response_body eval
qr/^hello, \w+ world\n\z/



=== TEST 11: request eval with several requests, each on its own connection
--- config
    location = /a { return 200 "a\n"; }
    location = /b { return 404; }
--- request eval
["GET /a", "GET /b"]
--- error_code eval
[200, 404]
--- response_body_like eval
["^a\$", "404 Not Found"]



=== TEST 12: pipelined_requests on one connection
--- config
    location = /a { return 200 "a\n"; }
    location = /b { return 200 "bb\n"; }
--- pipelined_requests eval
["GET /a", "GET /b"]
--- response_body eval
["a\n", "bb\n"]



=== TEST 13: raw_request split into two writes
--- config
    location = /raw { return 200 "raw $server_protocol\n"; }
--- raw_request eval
["GET /raw HTTP/1.0\r\n", "Host: localhost\r\n\r\n"]
--- response_body
raw HTTP/1.0



=== TEST 14: must_die on a bad directive; error_log sees the [emerg]
--- config
    bogus_directive on;
--- must_die
--- suppress_stderr
--- error_log
[emerg]
unknown directive "bogus_directive"



=== TEST 15: timeout with ms, abort, ignore_response (the request never ends)
--- config
--- raw_request eval
"GET / HTTP/1.1\r\nHost: localhost\r\n"
--- timeout: 300ms
--- abort
--- ignore_response



=== TEST 16: shutdown (half-close) after the request, wait, response_body_unlike
--- config
    location = /s { return 200 "still answered\n"; }
--- request
GET /s
--- shutdown
--- wait: 0.1
--- response_body_unlike
error



=== TEST 17: main_config and post_main_config, per-block log_level
--- main_config
    worker_rlimit_nofile 1024;
--- post_main_config
    pcre_jit off;
--- config
    location = /t { return 200 "levels\n"; }
--- log_level: warn
--- request
GET /t
--- response_body
levels
--- no_error_log
[debug]
[info]



=== TEST 18: a skipped block (its expectation is wrong on purpose)
--- config
    location = /t { return 200 "right\n"; }
--- request
GET /t
--- response_body
wrong
--- SKIP
