// The integration test runner: Boost.Test generates main() here.
#define BOOST_TEST_MODULE tenure_integration
#include <boost/test/unit_test.hpp>
